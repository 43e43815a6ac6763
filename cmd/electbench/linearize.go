package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// A second checker, independent of check.go's: the history of the register
// the acting leaders write, checked for linearizability by Porcupine
// against a fenced register. Every write sets the register to its term's
// token and its own name and bumps the counter, in one fenced transaction;
// the parent reads both, often, while the faults go on. As a fenced
// register, a write with token t may succeed only if t is at least every
// token accepted before it; a refused write changes nothing; a read returns
// the last accepted write and how many were accepted, so that a lost
// acknowledged write is seen as well as a stale one.
//
// A write whose outcome is unknown (its process died, its connection was
// cut) counts as accepted if its row committed, else it is dropped. It
// committed before every write whose row came after its own returned (rows
// are numbered in commit order: see write), and before every read that saw
// such a write: that bounds its return, where Porcupine would otherwise
// have to try it at every later moment.

// regState is the register: the last accepted write's token and name, and
// how many writes were accepted.
type regState struct {
	Token uint64
	Op    string
	N     int64
}

// regInput is a write of Op with Token, or a read.
type regInput struct {
	Write bool
	Token uint64
	Op    string
}

// regOutput is a write's outcome (Refused: ErrFenced) or what a read saw.
type regOutput struct {
	Refused bool
	Seen    regState
}

// fencedRegister is the model Porcupine checks the history against,
// starting from init.
func fencedRegister(init regState) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return init },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(regState), input.(regInput), output.(regOutput)
			switch {
			case !in.Write:
				return out.Seen == s, s
			case out.Refused:
				return true, s
			default:
				return in.Token >= s.Token, regState{Token: in.Token, Op: in.Op, N: s.N + 1}
			}
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(regInput), output.(regOutput)
			switch {
			case !in.Write:
				return fmt.Sprintf("read → token %d, %s, %d writes", out.Seen.Token, out.Seen.Op, out.Seen.N)
			case out.Refused:
				return fmt.Sprintf("write %s token %d → refused", in.Op, in.Token)
			}
			return fmt.Sprintf("write %s token %d → ok", in.Op, in.Token)
		},
	}
}

// regRead is one read of the register by the parent, with its call and
// return times.
type regRead struct {
	Call, Return int64
	Seen         regState
}

// observe reads the register every period until the returned function is
// called, which returns the reads. A read that fails (the server is being
// restarted, say) says nothing and is left out.
func (a *arena) observe(ctx context.Context, period time.Duration) func() []regRead {
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		reads []regRead
	)
	wg.Go(func() {
		for ctx.Err() == nil {
			r, err := a.readRegister(ctx)
			if err == nil {
				reads = append(reads, r)
			}
			sleep(ctx, period)
		}
	})
	return func() []regRead {
		cancel()
		wg.Wait()
		return reads
	}
}

// readRegister reads the register and the counter in one statement.
func (a *arena) readRegister(ctx context.Context) (regRead, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r := regRead{Call: time.Now().UnixNano()}
	err := a.admin.QueryRowContext(ctx, "SELECT r.token, r.op, c.n FROM bench_register r JOIN bench_counter c").Scan(&r.Seen.Token, &r.Seen.Op, &r.Seen.N)
	r.Return = time.Now().UnixNano()
	return r, err
}

// registerHistory builds the history Porcupine checks from the candidates'
// call and write events, the parent's reads, and the rows that committed
// (op name to row id).
func registerHistory(log []event, reads []regRead, committed map[string]int64) []porcupine.Operation {
	calls, returns := map[string]event{}, map[string]event{}
	for _, e := range log {
		switch e.Ev {
		case "call":
			calls[e.Op] = e
		case "write":
			returns[e.Op] = e
		}
	}
	// Known returns by row: a write's bounds the commits of every row
	// before its own, a read's those up to the row it saw. Keyed 2·id and
	// 2·id + 1, so that one search (key > 2·id) finds both.
	type done struct{ key, at int64 }
	var known []done
	for op, r := range returns {
		if id, ok := committed[op]; ok && r.OK {
			known = append(known, done{2 * id, r.At})
		}
	}
	for _, r := range reads {
		if id, ok := committed[r.Seen.Op]; ok {
			known = append(known, done{2*id + 1, r.Return})
		}
	}
	slices.SortFunc(known, func(x, y done) int { return cmp.Compare(x.key, y.key) })
	for i := len(known) - 2; i >= 0; i-- { // suffix minimum
		known[i].at = min(known[i].at, known[i+1].at)
	}
	bound := func(id int64) int64 {
		i := sort.Search(len(known), func(i int) bool { return known[i].key > 2*id })
		if i == len(known) {
			return math.MaxInt64
		}
		return known[i].at
	}
	var ops []porcupine.Operation
	for op, c := range calls {
		in := regInput{Write: true, Token: c.Token, Op: op}
		r, returned := returns[op]
		id, ok := committed[op]
		switch {
		case returned && (r.OK || r.Refused):
			ops = append(ops, porcupine.Operation{Input: in, Call: c.At, Output: regOutput{Refused: r.Refused}, Return: r.At})
		case ok: // unknown outcome, but committed
			ops = append(ops, porcupine.Operation{Input: in, Call: c.At, Output: regOutput{}, Return: max(c.At, bound(id))})
		}
	}
	for _, r := range reads {
		ops = append(ops, porcupine.Operation{Input: regInput{}, Call: r.Call, Output: regOutput{Seen: r.Seen}, Return: r.Return})
	}
	slices.SortFunc(ops, func(x, y porcupine.Operation) int { return cmp.Compare(x.Call, y.Call) })
	return ops
}

// segments cuts the history, sorted by call, into pieces of about size
// operations, each with the state it starts from. Porcupine's memory grows
// with the square of a history's length; a cut is made only where no
// operation is in flight (each piece's operations precede the next's) and
// every other accepted write of the piece precedes one of them in real time
// (so that one is the last in any order, and the state at the cut is
// known): checking the pieces in turn is then checking the whole.
func segments(ops []porcupine.Operation, size int) (pieces [][]porcupine.Operation, starts []regState) {
	state, from := regState{}, 0
	for i := range ops {
		if i+1 < len(ops) && i+1-from < size {
			continue
		}
		piece := ops[from : i+1]
		end, ok := endState(state, piece)
		quiet := i+1 == len(ops) || maxReturn(piece) < ops[i+1].Call
		if !ok || !quiet {
			continue
		}
		pieces, starts = append(pieces, piece), append(starts, state)
		state, from = end, i+1
	}
	if from < len(ops) { // no cut fitted: the rest is one piece
		pieces, starts = append(pieces, ops[from:]), append(starts, state)
	}
	return pieces, starts
}

// endState is the state after piece, from state, if every other accepted
// write of piece precedes one of them in real time; ok is false if that is
// not known.
func endState(state regState, piece []porcupine.Operation) (regState, bool) {
	var (
		last         *porcupine.Operation
		n            int64
		othersReturn int64 = math.MinInt64
	)
	for i := range piece {
		op := &piece[i]
		if !op.Input.(regInput).Write || op.Output.(regOutput).Refused {
			continue
		}
		n++
		if last == nil || op.Call > last.Call {
			if last != nil {
				othersReturn = max(othersReturn, last.Return)
			}
			last = op
		} else {
			othersReturn = max(othersReturn, op.Return)
		}
	}
	if last == nil {
		return state, true
	}
	if othersReturn >= last.Call {
		return state, false
	}
	in := last.Input.(regInput)
	return regState{Token: in.Token, Op: in.Op, N: state.N + n}, true
}

// maxReturn is the latest return in piece.
func maxReturn(piece []porcupine.Operation) int64 {
	m := int64(math.MinInt64)
	for _, op := range piece {
		m = max(m, op.Return)
	}
	return m
}

// linearizable checks the register history of the events in log, the
// parent's reads and the committed writes (op name to row id) with
// Porcupine, within timeout in all; it returns Porcupine's verdict (Ok,
// Illegal, Unknown on timeout), how many operations it checked, and unless
// Ok what it saw.
func linearizable(log []event, reads []regRead, committed map[string]int64, timeout time.Duration) (porcupine.CheckResult, int, string) {
	ops := registerHistory(log, reads, committed)
	res, where := checkRegister(ops, 4000, timeout)
	return res, len(ops), where
}

// checkRegister checks ops, sorted by call, in pieces of about size
// (segments), within timeout in all.
func checkRegister(ops []porcupine.Operation, size int, timeout time.Duration) (porcupine.CheckResult, string) {
	pieces, starts := segments(ops, size)
	deadline := time.Now().Add(timeout)
	for i, piece := range pieces {
		left := time.Until(deadline)
		if left <= 0 { // Porcupine takes a zero timeout as none
			return porcupine.Unknown, fmt.Sprintf("%d of %d pieces checked", i, len(pieces))
		}
		model := fencedRegister(starts[i])
		switch res := porcupine.CheckOperationsTimeout(model, piece, left); res {
		case porcupine.Illegal:
			// Again, keeping what describes it (which costs memory).
			_, info := porcupine.CheckOperationsVerbose(model, piece, 0)
			return res, describeIllegal(piece, info)
		case porcupine.Unknown:
			return res, fmt.Sprintf("piece %d of %d, of %d operations", i+1, len(pieces), len(piece))
		}
	}
	return porcupine.Ok, ""
}

// describeIllegal names the time span of an illegal piece and the last
// operation of its longest linearizable prefix.
func describeIllegal(piece []porcupine.Operation, info porcupine.LinearizationInfo) string {
	first, last := time.Unix(0, piece[0].Call), time.Unix(0, maxReturn(piece))
	s := fmt.Sprintf("%d operations from %s to %s", len(piece), first.Format("15:04:05.000000"), last.Format("15:04:05.000000"))
	var longest []porcupine.Operation
	for _, partial := range info.PartialLinearizationsOperations() {
		for _, l := range partial {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	if n := len(longest); n > 0 {
		m := fencedRegister(regState{})
		op := longest[n-1]
		s += fmt.Sprintf("; the longest linearizable prefix (%d operations) ends with %s at %s", n, m.DescribeOperation(op.Input, op.Output), time.Unix(0, op.Return).Format("15:04:05.000000"))
	}
	return s
}
