//go:build !linux

package main

import (
	"flag"

	"github.com/go-sql-driver/mysql"
)

// electctl run stops its command with Linux's parent-death signal and
// process groups (run.go); elsewhere electctl has the other commands.

type runOptions struct {
	argv   []string
	dashed bool
}

const runHelp = "\nelectctl run needs Linux.\n"

func (c *cli) runFlags(*flag.FlagSet) {}

func (c *cli) validateRun(map[string]bool) string {
	return "electctl run needs Linux: it relies on the parent-death signal and process groups to stop its command in time"
}

func (c *cli) runCommand(string, *mysql.Config) int { return exitUsage }

func internalCommand([]string) (int, bool) { return 0, false }
