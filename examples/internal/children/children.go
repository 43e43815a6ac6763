// Package children runs an example's own binary again as candidate
// processes and collects the lines they print, for the examples that show
// several processes (demo, rollingdeploy).
package children

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// Line is one line a child printed, and when it was read.
type Line struct {
	ID, Text string
	At       time.Time
}

// Group is the children of one run. Lines receives what they print.
type Group struct {
	Lines chan Line
	self  string
	procs map[string]*exec.Cmd
}

// New returns an empty group of children of this binary.
func New() (*Group, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &Group{Lines: make(chan Line, 100), self: self, procs: map[string]*exec.Cmd{}}, nil
}

// Start runs this binary again as child id, with env added to its
// environment; its stdout goes to Lines, its stderr to this one's.
func (g *Group) Start(id string, env ...string) (*exec.Cmd, error) {
	cmd := exec.Command(g.self)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g.procs[id] = cmd
	fmt.Printf("started %s (pid %d)\n", id, cmd.Process.Pid)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			g.Lines <- Line{id, sc.Text(), time.Now()}
		}
	}()
	return cmd, nil
}

// Close kills the children still running and waits for them.
func (g *Group) Close() {
	for _, p := range g.procs {
		if p.ProcessState == nil {
			p.Process.Kill()
			p.Wait()
		}
	}
}
