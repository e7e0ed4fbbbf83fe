package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// command sends one command on a new connection and returns a scalar reply
// as text. It keeps testenv free of a Redis client library.
func command(addr string, args ...string) (string, error) {
	v, err := roundTrip(addr, args)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("testenv: %s: array reply where a scalar was expected", args[0])
	}
	return s, nil
}

// commandArray is command for replies that are arrays of scalars.
func commandArray(addr string, args ...string) ([]string, error) {
	v, err := roundTrip(addr, args)
	if err != nil {
		return nil, err
	}
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("testenv: %s: scalar reply where an array was expected", args[0])
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, _ := it.(string)
		out = append(out, s)
	}
	return out, nil
}

func roundTrip(addr string, args []string) (any, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(conn))
}

// readReply reads one RESP2 reply: strings and integers as string, nil
// bulk strings as "", arrays as []any.
func readReply(rd *bufio.Reader) (any, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("testenv: empty RESP line")
	}
	switch line[0] {
	case '-':
		return nil, errors.New(line[1:])
	case '+', ':':
		return line[1:], nil
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		items := make([]any, 0, max(n, 0))
		for range n {
			it, err := readReply(rd)
			if err != nil {
				return nil, err
			}
			items = append(items, it)
		}
		return items, nil
	}
	return nil, fmt.Errorf("testenv: unknown RESP reply %q", line)
}
