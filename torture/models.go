package torture

import (
	"fmt"
	"slices"

	"github.com/anishathalye/porcupine"
)

// The porcupine models. Each is small and partitioned: by lock key for the
// two lock models, by resource for the register. One combined model runs
// all three over a whole history for the visualization; each model alone
// gives its own verdict.

// modelKind names a model.
type modelKind string

const (
	modelMutex    modelKind = "mutex"    // acquire/end pairs: no two overlapping holds
	modelTokens   modelKind = "tokens"   // each grant's token above the last
	modelRegister modelKind = "register" // reads see the last admitted write; stale writes refused
)

var modelKinds = []modelKind{modelMutex, modelTokens, modelRegister}

// mutexIn is an input of the mutex model: a grant (acquire) or the end of
// one as its holder saw it (released, or its context cancelled).
type mutexIn struct {
	Worker string
	Grant  int
	End    bool
	Token  uint64
}

// tokenIn is an input of the token model: a grant with its token.
type tokenIn struct {
	Worker string
	Token  uint64
}

// regIn is an input of the register model. Output: regOut.
type regIn struct {
	Worker string
	Write  bool
	Token  uint64
	Value  int64 // written value
}

// regOut is what the store answered: the value read, or whether the write
// was admitted.
type regOut struct {
	Value    int64
	Admitted bool
}

// regState is the state of a fenced register: its value and the highest
// token admitted.
type regState struct {
	Value   int64
	Highest uint64
}

// holder is the state of the mutex model: the grant that holds the key (0
// if free) and its worker.
type holder struct {
	Grant  int
	Worker string
}

// lastToken is the state of the token model.
type lastToken uint64

// step is the combined step function. The initial state is nil; each
// partition holds inputs of one kind only.
func step(state, input, output any) (bool, any) {
	switch in := input.(type) {
	case mutexIn:
		s, _ := state.(holder)
		if !in.End {
			return s.Grant == 0, holder{Grant: in.Grant, Worker: in.Worker}
		}
		return s.Grant == in.Grant, holder{}
	case tokenIn:
		s, _ := state.(lastToken)
		return in.Token > uint64(s), lastToken(in.Token)
	case regIn:
		s, _ := state.(regState)
		out := output.(regOut)
		switch {
		case !in.Write:
			return out.Value == s.Value, s
		case out.Admitted:
			// A fenced register admits a token at least the highest.
			return in.Token >= s.Highest, regState{Value: in.Value, Highest: in.Token}
		default:
			// It refuses only a token below the highest.
			return in.Token < s.Highest, s
		}
	}
	return false, state
}

func describeOp(input, output any) string {
	switch in := input.(type) {
	case mutexIn:
		if in.End {
			return fmt.Sprintf("end(%s, t%d)", in.Worker, in.Token)
		}
		return fmt.Sprintf("acquire(%s) -> t%d", in.Worker, in.Token)
	case tokenIn:
		return fmt.Sprintf("grant(%s) -> t%d", in.Worker, in.Token)
	case regIn:
		out := output.(regOut)
		if !in.Write {
			return fmt.Sprintf("read(t%d) -> %d", in.Token, out.Value)
		}
		if out.Admitted {
			return fmt.Sprintf("write(%d, t%d) -> ok", in.Value, in.Token)
		}
		return fmt.Sprintf("write(%d, t%d) -> stale", in.Value, in.Token)
	}
	return fmt.Sprint(input, output)
}

func describeState(state any) string {
	switch s := state.(type) {
	case holder:
		if s.Grant == 0 {
			return "free"
		}
		return fmt.Sprintf("held by %s (grant %d)", s.Worker, s.Grant)
	case lastToken:
		return fmt.Sprintf("last token %d", s)
	case regState:
		return fmt.Sprintf("value %d, highest token %d", s.Value, s.Highest)
	}
	return "initial"
}

// partitionKey is what porcupine partitions by: the model and the lock key
// or resource.
type partitionKey struct {
	model modelKind
	key   string
}

// opMeta is carried by every porcupine operation, for partitioning and the
// visualization.
type opMeta struct {
	part partitionKey
	note string
}

func partition(history []porcupine.Operation) [][]porcupine.Operation {
	var order []partitionKey
	parts := map[partitionKey][]porcupine.Operation{}
	for _, op := range history {
		k := op.Metadata.(opMeta).part
		if _, ok := parts[k]; !ok {
			order = append(order, k)
		}
		parts[k] = append(parts[k], op)
	}
	out := make([][]porcupine.Operation, 0, len(order))
	for _, k := range order {
		out = append(out, parts[k])
	}
	return out
}

// model is the combined porcupine model.
var model = porcupine.Model{
	Partition:         partition,
	Init:              func() any { return nil },
	Step:              step,
	DescribeOperation: describeOp,
	DescribeState:     describeState,
	DescribeOperationMetadata: func(m any) string {
		mm, _ := m.(opMeta)
		return mm.note
	},
}

// operations turns a History into porcupine operations for the given
// models, with End operations already in it. clients maps worker names to
// porcupine client ids.
func operations(ops []Op, kinds []modelKind, clients map[string]int) []porcupine.Operation {
	want := func(k modelKind) bool { return slices.Contains(kinds, k) }
	var out []porcupine.Operation
	add := func(k modelKind, op Op, in, outv any) {
		out = append(out, porcupine.Operation{
			ClientId: clients[op.Worker], Input: in, Output: outv, Call: op.Call, Return: op.Return,
			Metadata: opMeta{part: partitionKey{k, op.Key}, note: op.Note},
		})
	}
	for _, op := range ops {
		switch op.Kind {
		case KindAcquire:
			// Read locks share: the mutex model is the exclusive
			// grants'; the overlap count (Check) covers a read lock
			// overlapping an exclusive one.
			if want(modelMutex) && !op.Shared {
				add(modelMutex, op, mutexIn{Worker: op.Worker, Grant: op.Grant, Token: op.Token}, nil)
			}
			if want(modelTokens) {
				add(modelTokens, op, tokenIn{Worker: op.Worker, Token: op.Token}, nil)
			}
		case KindEnd:
			if want(modelMutex) && !op.Shared {
				add(modelMutex, op, mutexIn{Worker: op.Worker, Grant: op.Grant, End: true, Token: op.Token}, nil)
			}
		case KindRead:
			if want(modelRegister) {
				add(modelRegister, op, regIn{Worker: op.Worker, Token: op.Token}, regOut{Value: op.Value})
			}
		case KindWrite:
			if want(modelRegister) {
				add(modelRegister, op, regIn{Worker: op.Worker, Write: true, Token: op.Token, Value: op.Value},
					regOut{Admitted: op.Outcome == OutcomeOK})
			}
		}
	}
	return out
}
