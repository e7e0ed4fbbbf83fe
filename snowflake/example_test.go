package snowflake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockgov/lockgov/snowflake"
)

func ExampleNew() {
	g, err := snowflake.New(7)
	if err != nil {
		panic(err)
	}
	id, err := g.NextID(context.Background())
	var cbe *snowflake.ClockBackwardsError
	switch {
	case errors.As(err, &cbe):
		// The clock went back further than MaxWait: fail this request, retry elsewhere.
		fmt.Println("clock went back by", cbe.Offset)
		return
	case err != nil:
		panic(err)
	}
	p, _ := g.Decode(id)
	fmt.Println("worker", p.Worker, "recent", time.Since(p.Time) < time.Minute)
	// Output: worker 7 recent true
}

func ExampleGenerator_NextN() {
	g, _ := snowflake.New(1)
	ids, err := g.NextN(context.Background(), 1000)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(ids), ids[0] < ids[999])
	// Output: 1000 true
}

func ExampleDecode() {
	p, _ := snowflake.Decode(1 << 22)
	fmt.Println(p.Time, p.Worker, p.Sequence)
	// Output: 2024-01-01 00:00:00.001 +0000 UTC 0 0
}

func ExampleLayout_End() {
	fmt.Println(snowflake.DefaultLayout.End(snowflake.DefaultEpoch).Format(time.DateOnly))
	fmt.Println(snowflake.LayoutJSSafe.MaxID() <= snowflake.MaxSafeInteger)
	// Output:
	// 2093-09-06
	// true
}

func ExampleID() {
	type user struct {
		ID   snowflake.ID `json:"id"`
		Name string       `json:"name"`
	}
	b, _ := json.Marshal(user{ID: 1234567890123456789, Name: "ada"})
	fmt.Println(string(b))
	// Output: {"id":"1234567890123456789","name":"ada"}
}

func ExampleNewSegment() {
	g, _ := snowflake.New(3)
	seg, err := snowflake.NewSegment(g, 4096)
	if err != nil {
		panic(err)
	}
	defer seg.Close()
	id, _ := seg.Next(context.Background())
	fmt.Println(id > 0)
	// Output: true
}
