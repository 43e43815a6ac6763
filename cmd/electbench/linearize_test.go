package main

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Cutting a history into pieces checks the same as checking it whole:
// random histories of terms writing in turn, a leader's last write at
// times overlapping its successor's first, two writes of a term at times
// overlapping each other, reads in between, some with a
// stale write of the previous term accepted (planted). The pieces agree
// with Porcupine on the whole history, and there are several.
func TestSegmentsCheckTheWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	overlaps := 0 // writes of two terms in flight at once
	for run := range 40 {
		planted := run%2 == 1
		var ops []porcupine.Operation
		state, at := regState{}, int64(0)
		write := func(token uint64, op string, call, ret int64) {
			ops = append(ops, porcupine.Operation{Input: regInput{Write: true, Token: token, Op: op}, Call: call, Output: regOutput{}, Return: ret})
		}
		stale := 5 + rng.IntN(20) // the term whose successor's write is followed by a stale one
		for term := uint64(1); term <= 30; term++ {
			for i := range 20 + rng.IntN(20) {
				op := fmt.Sprintf("%d.%d", term, i)
				if i == 0 && term > 1 && rng.IntN(2) == 0 {
					// The new term's first write overlaps what came last:
					// the old term's last write, or a read.
					write(term, op, at-9, at+3)
				} else {
					write(term, op, at, at+3)
				}
				state = regState{Token: term, Op: op, N: state.N + 1}
				at += 10
				if rng.IntN(4) == 0 {
					// Two writes of the term overlap: either may be the
					// last, and a read tells which.
					x, y := op+"x", op+"y"
					write(term, x, at, at+8)
					write(term, y, at+2, at+5)
					last := []string{x, y}[rng.IntN(2)]
					state = regState{Token: term, Op: last, N: state.N + 2}
					ops = append(ops, porcupine.Operation{Input: regInput{}, Call: at + 10, Output: regOutput{Seen: state}, Return: at + 12})
					at += 20
				}
				if rng.IntN(3) == 0 {
					ops = append(ops, porcupine.Operation{Input: regInput{}, Call: at, Output: regOutput{Seen: state}, Return: at + 2})
					at += 10
				}
				if planted && int(term) == stale && i == 3 {
					write(term-1, "stale", at, at+3) // accepted after a newer term's writes
					state = regState{Token: term - 1, Op: "stale", N: state.N + 1}
					at += 10
				}
			}
		}
		for i := 1; i < len(ops); i++ {
			x, y := ops[i-1], ops[i]
			if x.Input.(regInput).Write && y.Input.(regInput).Write && x.Input.(regInput).Token != y.Input.(regInput).Token && y.Call <= x.Return {
				overlaps++
			}
		}
		pieces, _ := segments(ops, 100)
		whole := porcupine.CheckOperations(fencedRegister(regState{}), ops)
		res, _ := checkRegister(ops, 100, time.Minute)
		cut := res == porcupine.Ok
		if len(pieces) < 5 || whole != !planted || cut != whole {
			t.Fatalf("run %d (planted %v): %d pieces; whole %v, pieces %v", run, planted, len(pieces), whole, cut)
		}
	}
	if overlaps < 100 {
		t.Fatalf("only %d overlapping writes of two terms", overlaps)
	}
}
