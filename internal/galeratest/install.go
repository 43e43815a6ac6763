package galeratest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sqlelect/election/internal/mysqltest"
)

// Where the Debian packages put what the harness runs.
const (
	provider = "/usr/lib/galera/libgalera_smm.so" // galera-4
	haproxy  = "/usr/sbin/haproxy"                // haproxy
)

// debianPackage is one package the cluster needs, and how to tell that it
// is there.
type debianPackage struct {
	name    string
	present func() bool
}

var packages = []debianPackage{
	{"mariadb-server", func() bool { return mariadbd() != "" && installDB() != "" }},
	{"galera-4", func() bool { return exists(provider) }},
	{"rsync", func() bool { _, err := exec.LookPath("rsync"); return err == nil }}, // the SST of a joining node
	{"haproxy", func() bool { return exists(haproxy) }},
}

// mariadbd returns the MariaDB server binary, "" if there is none: Galera
// is MariaDB's (a mysqld of Oracle's is no use here).
func mariadbd() string {
	if bin := mysqltest.PrivateBinary(); filepath.Base(bin) == "mariadbd" {
		return bin
	}
	return ""
}

func installDB() string {
	for _, name := range []string{"mariadb-install-db", "mysql_install_db"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		if p := filepath.Join("/usr/bin", name); exists(p) {
			return p
		}
	}
	return ""
}

func exists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// EnsurePackages installs the packages that are missing, as
// scripts/mariadb.sh installs the single server: apt-get as root, or
// through sudo when it needs no password. It returns why it could not
// (no apt-get, not root and no sudo, apt-get failed), "" when everything
// is there.
func EnsurePackages() (cannot string) {
	var missing []string
	for _, p := range packages {
		if !p.present() {
			missing = append(missing, p.name)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	list := strings.Join(missing, " ")
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "missing Debian packages (" + list + ") and no apt-get to install them"
	}
	var sudo []string
	if os.Getuid() != 0 {
		if err := exec.Command("sudo", "-n", "true").Run(); err != nil {
			return "missing Debian packages (" + list + "), and installing them needs root: run as root, " +
				"give sudo without a password, or run: sudo apt-get install -y " + list
		}
		sudo = []string{"sudo", "-n"}
	}
	fmt.Fprintf(os.Stderr, "galeratest: installing %s (apt-get install)...\n", list)
	run := func(args ...string) error {
		args = append(sudo, args...)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out.String())
		}
		return nil
	}
	if err := run("apt-get", "update", "-qq"); err != nil {
		return "installing " + list + ": " + err.Error()
	}
	if err := run(append([]string{"apt-get", "install", "-y", "-qq"}, missing...)...); err != nil {
		return "installing " + list + ": " + err.Error()
	}
	for _, p := range packages {
		if !p.present() {
			return "apt-get installed " + list + ", but " + p.name + "'s files are still not found"
		}
	}
	return ""
}
