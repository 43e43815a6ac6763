// Package children runs an example's own binary again as candidate
// processes and collects the lines they print, for the examples that show
// several processes (demo, rollingdeploy).
package children

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Line is one line a child printed, and when it was read.
type Line struct {
	ID, Text string
	At       time.Time
}

// Group is the children of one run. Lines receives what they print.
type Group struct {
	Lines    chan Line
	self     string
	children []*Child
}

// Child is one child process.
type Child struct {
	cmd  *exec.Cmd
	read chan struct{} // closed once its stdout has been read to the end
}

// New returns an empty group of children of this binary.
func New() (*Group, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &Group{Lines: make(chan Line, 100), self: self}, nil
}

// Start runs this binary again as child id, with env added to its
// environment; its stdout goes to Lines, its stderr to this one's.
func (g *Group) Start(id string, env ...string) (*Child, error) {
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
	c := &Child{cmd: cmd, read: make(chan struct{})}
	g.children = append(g.children, c)
	fmt.Printf("started %s (pid %d)\n", id, cmd.Process.Pid)
	go func() {
		defer close(c.read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			g.Lines <- Line{id, sc.Text(), time.Now()}
		}
	}()
	return c, nil
}

// Stop sends the child sig (SIGKILL: kills it) and waits for it to exit,
// after the last line it printed.
func (c *Child) Stop(sig syscall.Signal) {
	if c.cmd.ProcessState != nil {
		return
	}
	c.cmd.Process.Signal(sig)
	<-c.read
	c.cmd.Wait()
}

// Close kills the children still running and waits for them.
func (g *Group) Close() {
	for _, c := range g.children {
		c.Stop(syscall.SIGKILL)
	}
}
