package election

import "testing"

// The statements the library sends carry their arguments as literals; what
// reaches the server must be exactly the argument, whatever it holds. The
// suite runs every statement against a real server; this pins the
// literals themselves.
func TestText(t *testing.T) {
	for _, tc := range []struct {
		query string
		args  []any
		want  string
	}{
		{"SELECT GET_LOCK(?, ?)", []any{"cron/0a1b", 0.25}, "SELECT GET_LOCK('cron/0a1b', 0.25)"},
		{"x = ? AND y = ? AND z = ?", []any{uint64(18446744073709551615), int64(-5), 7}, "x = 18446744073709551615 AND y = -5 AND z = 7"},
		{"a = ?", []any{"it's \\ \x00 ü"}, "a = _utf8mb4 X'69742773205c200020c3bc'"},
		{"a = ?", []any{nil}, "a = NULL"},
		{"a = '?' AND b = ?", []any{"host-a"}, "a = '?' AND b = 'host-a'"},
		{"`t?` = ?", []any{""}, "`t?` = ''"},
	} {
		if got := text(tc.query, tc.args...); got != tc.want {
			t.Errorf("text(%q, %v) = %q, want %q", tc.query, tc.args, got, tc.want)
		}
	}
	for _, bad := range []func(){
		func() { text("? ?", 1) },
		func() { text("?", 1, 2) },
		func() { text("?", struct{}{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("a mismatch of placeholders and arguments did not panic")
				}
			}()
			bad()
		}()
	}
}
