package snowflakeclock

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

const (
	epoch        int64 = 1704067200000 // 2024-01-01 00:00:00 UTC
	workerIDBits uint8 = 10
	seqBits      uint8 = 12
	maxWorkerID  int64 = -1 ^ (-1 << workerIDBits)
	maxSeq       int64 = -1 ^ (-1 << seqBits)
)

// Snowflake is spec 000's generator: it checks for a clock that moved back
// (waits up to 5 ms, refuses beyond). Negative.
type Snowflake struct {
	mu        sync.Mutex
	lastStamp int64
	workerID  int64
	seq       int64
}

func NewSnowflake(workerID int64) (*Snowflake, error) {
	if workerID < 0 || workerID > maxWorkerID {
		return nil, fmt.Errorf("workerID %d out of range", workerID)
	}
	return &Snowflake{workerID: workerID}, nil
}

func (s *Snowflake) NextID() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	now := time.Now().UnixMilli()
	if now < s.lastStamp {
		offset := s.lastStamp - now
		if offset > 5 {
			return 0, fmt.Errorf("clock moved backwards %dms, refused", offset)
		}
		time.Sleep(time.Duration(offset) * time.Millisecond)
		now = time.Now().UnixMilli()
		if now < s.lastStamp {
			return 0, errors.New("clock still backwards after wait")
		}
	}

	if now == s.lastStamp {
		s.seq = (s.seq + 1) & maxSeq
		if s.seq == 0 {
			for now <= s.lastStamp {
				now = time.Now().UnixMilli()
			}
		}
	} else {
		s.seq = 0
	}

	s.lastStamp = now
	id := ((now - epoch) << (workerIDBits + seqBits)) |
		(s.workerID << seqBits) |
		s.seq
	return id, nil
}

// The same generator without the backwards check: after an NTP step back
// it reissues timestamps, and IDs.
type Naive struct {
	mu        sync.Mutex
	lastStamp int64
	workerID  int64
	seq       int64
}

func (s *Naive) NextID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UnixMilli() // want `ID generator reads the wall clock here and shifts it into IDs with no backwards-clock check`
	if now == s.lastStamp {
		s.seq = (s.seq + 1) & maxSeq
		if s.seq == 0 {
			for now <= s.lastStamp {
				now = time.Now().UnixMilli()
			}
		}
	} else {
		s.seq = 0
	}
	s.lastStamp = now
	return (now-epoch)<<(workerIDBits+seqBits) | s.workerID<<seqBits | s.seq
}

// A clock helper, as many generators have.
func timeGen() int64 { return time.Now().UnixNano() / 1e6 }

func (s *Naive) NextIDHelper() int64 {
	ts := timeGen() // want `ID generator reads the wall clock`
	s.seq = (s.seq + 1) & maxSeq
	return ts<<22 | s.seq
}

// Negative: a clamp is a check.
func (s *Naive) NextIDClamped() int64 {
	now := time.Now().UnixMilli()
	if now < s.lastStamp {
		now = s.lastStamp
	}
	s.lastStamp = now
	return now << 22
}

// Negative: a monotonic clock cannot step back.
var start = time.Now()

func (s *Naive) NextIDMonotonic() int64 {
	ms := time.Since(start).Milliseconds()
	return ms << 22
}
