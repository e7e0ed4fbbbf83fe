package etcdlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
)

func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	locker, err := etcdlock.New(cli, etcdlock.WithService("payments"))
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = instrument.Do(ctx, instrument.Govern(locker), "lock:quota:42", func(ctx context.Context) error {
		// ctx ends with ErrLockLost if the lease is lost; pass the fence
		// to the protected resource.
		return nil
	}, instrument.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleFromMutex() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	// Existing code locks concurrency.NewMutex(s, "/locks/"+key); governed,
	// the same Mutexes get spans, metrics and the timeout rule.
	mutexes, err := etcdlock.FromMutex(s, "/locks/")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := instrument.Govern(mutexes).Acquire(ctx, "order-42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("fence", lease.Fence())
}
