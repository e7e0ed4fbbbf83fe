package chaos

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// register is the protected resource's state: the last applied write.
type register struct {
	fence uint64
	value string
}

// resourceInput is a write (with its fence and value) or a read.
type resourceInput struct {
	write bool
	fence uint64
	value string
}

// resourceModel is the fenced register. strictStale: a refusal reports the
// fence stored at that moment (Redis, SQL), which must then be at or above
// the offered one; otherwise (etcd, which refuses a holder whose lock is
// gone even if nobody wrote since) a refusal only must not change the state.
func resourceModel(strictStale bool) porcupine.Model {
	nm := &porcupine.NondeterministicModel{
		Init: func() []any { return []any{register{}} },
		Step: func(state, input, output any) []any {
			s := state.(register)
			in := input.(resourceInput)
			out := output.(Op)
			if !in.write {
				if out.Outcome != OK || (out.Value == s.value && out.Stored == s.fence) {
					return []any{s}
				}
				return nil
			}
			applied := register{fence: in.fence, value: in.value}
			switch out.Outcome {
			case OK:
				if in.fence > s.fence {
					return []any{applied}
				}
				return nil
			case Stale:
				if !strictStale || (s.fence >= in.fence && out.Stored == s.fence) {
					return []any{s}
				}
				return nil
			case Unknown:
				if in.fence > s.fence {
					return []any{s, applied}
				}
				return []any{s}
			default: // Failed: no effect
				return []any{s}
			}
		},
		Equal: func(a, b any) bool { return a.(register) == b.(register) },
		DescribeOperation: func(input, output any) string {
			in := input.(resourceInput)
			out := output.(Op)
			if !in.write {
				return fmt.Sprintf("read -> %q fence %d (%s)", out.Value, out.Stored, out.Outcome)
			}
			if out.Outcome == Stale {
				return fmt.Sprintf("write %q fence %d -> stale (stored %d)", in.value, in.fence, out.Stored)
			}
			return fmt.Sprintf("write %q fence %d -> %s", in.value, in.fence, out.Outcome)
		},
		DescribeState: func(state any) string {
			s := state.(register)
			return fmt.Sprintf("%q fence %d", s.value, s.fence)
		},
	}
	return nm.ToModel()
}

// mutexInput is the start (acquire) or end (release) of a client's hold.
type mutexInput struct {
	acquire bool
	client  int
}

// mutexModel is a lock: acquire needs it free, release needs it held by
// the releasing client.
func mutexModel() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return -1 },
		Step: func(state, input, _ any) (bool, any) {
			holder := state.(int)
			in := input.(mutexInput)
			if in.acquire {
				return holder == -1, in.client
			}
			return holder == in.client, -1
		},
		DescribeOperation: func(input, _ any) string {
			in := input.(mutexInput)
			if in.acquire {
				return fmt.Sprintf("client %d acquire", in.client)
			}
			return fmt.Sprintf("client %d end of hold", in.client)
		},
		DescribeState: func(state any) string {
			if h := state.(int); h >= 0 {
				return fmt.Sprintf("held by %d", h)
			}
			return "free"
		},
	}
}
