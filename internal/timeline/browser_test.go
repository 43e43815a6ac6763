package timeline

import (
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// chromium is Debian's chromium, which scripts/test.sh installs; the test
// skips, saying why, without it.
func chromium(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium to render the SVG with: install Debian's chromium package (scripts/test.sh does)")
	}
	return p
}

// tail is the end of a command's output, for an error.
func tail(b []byte) []byte {
	if len(b) > 2000 {
		return b[len(b)-2000:]
	}
	return b
}

// A browser draws the picture: a screenshot of its size, in the bars'
// colours, the gaps' shade among them.
func TestABrowserDrawsTheHistory(t *testing.T) {
	bin := chromium(t)
	l := Arrange("Terms of jobs", sample(), at(100))
	dir := t.TempDir()
	svg := filepath.Join(dir, "history.svg")
	if err := os.WriteFile(svg, l.SVG(), 0o644); err != nil {
		t.Fatal(err)
	}
	w, h := int(l.Width+0.5), int(l.Height+0.5)
	shot := filepath.Join(dir, "history.png")
	cmd := exec.Command(bin, "--headless", "--disable-gpu", "--no-sandbox", "--screenshot="+shot,
		fmt.Sprintf("--window-size=%d,%d", w, h), svg)
	cmd.Dir = dir
	done := make(chan error, 1)
	var out []byte
	go func() {
		var err error
		out, err = cmd.CombinedOutput()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chromium: %v\n%s", err, tail(out))
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("chromium did not finish within 2 minutes")
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, tail(out))
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("screenshot %dx%d, want %dx%d", b.Dx(), b.Dy(), w, h)
	}
	seen := colours(img)
	if len(seen) < 8 {
		t.Fatalf("the screenshot has %d colours: blank, or nearly", len(seen))
	}
	for _, reason := range []string{Leading, "handed-over", "hang-killed", "demote-killed", "resigned"} {
		if c := ReasonColor(reason); seen[c] < 20 {
			t.Errorf("%s's colour %s covers %d pixels of the screenshot", reason, c, seen[c])
		}
	}
	// The hatching is anti-aliased; the shade across the lanes is not.
	if seen[gapShade] < 20 {
		t.Errorf("the gaps' shade %s covers %d pixels of the screenshot", gapShade, seen[gapShade])
	}
}

// colours counts the pixels of each colour of img, as #rrggbb.
func colours(img image.Image) map[string]int {
	seen := map[string]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen["#"+hex(r)+hex(g)+hex(bl)]++
		}
	}
	return seen
}

func hex(v uint32) string {
	s := strconv.FormatUint(uint64(v>>8), 16)
	if len(s) < 2 {
		s = "0" + s
	}
	return s
}
