// Spec 002, "Go微服务锁治理规范".
package specs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

type EtcdLock struct {
	client  *clientv3.Client
	key     string
	leaseID clientv3.LeaseID
}

// 示例：etcd 分布式锁安全封装. The spec checks !resp.Succeeded on the lease
// grant's response, which has no such field, so it does not compile; as
// written, the transaction's response goes to _ and a lost race returns a
// lock.
func NewEtcdLock(client *clientv3.Client, key string, ttl int64) (*EtcdLock, error) {
	// 创建带 TTL 的租约
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := client.Grant(ctx, ttl)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("failed to grant lease: %w", err)
	}

	// 尝试获取锁（CompareAndSwap）
	lockCtx, lockCancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = client.Txn(lockCtx).If( // incident: uncheckedtxn
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
	).Then(
		clientv3.OpPut(key, "locked", clientv3.WithLease(resp.ID)),
	).Commit()
	lockCancel()
	if err != nil {
		return nil, errors.New("lock acquisition failed")
	}
	return &EtcdLock{client: client, key: key, leaseID: resp.ID}, nil
}

// 有超时："任何 Lock() 调用必须绑定明确 context.WithTimeout()，禁止无限等待" -
// the call the rule forbids.
func LockForever(s *concurrency.Session, orderID string) (*concurrency.Mutex, error) {
	m := concurrency.NewMutex(s, "/lock/order/"+orderID)
	return m, m.Lock(context.Background()) // incident: nodeadline
}

// 4.1 数据同步机制: "Redis写入成功但DB写入失败时，缓存已标记为已处理，下次请求将跳过实际
// 业务逻辑". The Python check in Go, with the marker written first - the
// order that produces exactly that failure.
type OrderDB interface {
	SaveOrder(ctx context.Context, orderID string) error
}

func ProcessOrder(ctx context.Context, rdb redis.Cmdable, db OrderDB, orderID string) (string, error) {
	if n, _ := rdb.Exists(ctx, "idempotent:"+orderID).Result(); n > 0 {
		return "DUPLICATED", nil
	}
	rdb.SetEx(ctx, "idempotent:"+orderID, "processed", time.Hour) // incident: markerbeforewrite
	if err := db.SaveOrder(ctx, orderID); err != nil {
		return "", err
	}
	return "SUCCESS", nil
}

// 4.3 超时锁获取示例: a context.WithTimeout around SetNX - nothing to report.
func LockWithTimeout(rdb redis.Cmdable) error {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()

	err := rdb.SetNX(ctx, "order:lock:1001", "worker-A", 30*time.Second).Err()
	if err != nil {
		return fmt.Errorf("redis error: %w", err)
	}
	return nil
}
