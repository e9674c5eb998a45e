package logfield

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSeconds(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want float64
	}{{0, 0}, {1500 * time.Millisecond, 1.5}, {18601155 * time.Nanosecond, 0.019}, {-time.Second, -1}} {
		if got := Seconds(tt.d); got != tt.want {
			t.Errorf("Seconds(%v) = %v, want %v", tt.d, got, tt.want)
		}
	}
}

// durationWords in a log key mark a duration.
var durationWords = []string{"duration", "seconds", "_in", "interval", "timeout", "after_", "took", "elapsed", "delay", "wait"}

// TestLogDurationsAreSeconds scans every slog call of the module (outside
// tests): a key naming a duration ends in "seconds" and its value is a
// number (Seconds(d), d.Seconds() or a float variable), never a
// time.Duration (time.Since, t.Sub), a string (d.String(), a formatted
// float) or slog.Duration: one type per field, so that log queries can
// compare them (issue 29).
func TestLogDurationsAreSeconds(t *testing.T) {
	root := filepath.Join("..", "..")
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || path == filepath.Join(root, "internal", "test")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		bad = append(bad, scanFile(t, path)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}

func scanFile(t *testing.T, path string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var bad []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == "slog" && sel.Sel.Name == "Duration" {
			bad = append(bad, fmt.Sprintf("%s: slog.Duration: log Seconds(d) under a key ending in seconds", fset.Position(call.Pos())))
			return true
		}
		switch sel.Sel.Name {
		case "Debug", "Info", "Warn", "Error":
		default:
			return true
		}
		if len(call.Args) < 1 || !isStringish(call.Args[0]) {
			return true
		}
		for i := 1; i+1 < len(call.Args); i += 2 {
			if why := checkPair(call.Args[i], call.Args[i+1]); why != "" {
				bad = append(bad, fmt.Sprintf("%s: %s", fset.Position(call.Args[i].Pos()), why))
			}
		}
		return true
	})
	return bad
}

// isStringish reports whether e may be a log message (a string literal
// or an expression built from one).
func isStringish(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BasicLit:
		return e.Kind == token.STRING
	case *ast.BinaryExpr:
		return isStringish(e.X) || isStringish(e.Y)
	}
	return false
}

func checkPair(k, v ast.Expr) string {
	if isDurationExpr(v) {
		return "a time.Duration value: log Seconds(d)"
	}
	lit, ok := k.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	key, _ := strconv.Unquote(lit.Value)
	durationKey := false
	for _, w := range durationWords {
		if strings.Contains(key, w) {
			durationKey = true
		}
	}
	if !durationKey {
		return ""
	}
	if !strings.HasSuffix(key, "seconds") {
		return fmt.Sprintf("key %q names a duration: end it in seconds and log Seconds(d)", key)
	}
	if call, ok := v.(*ast.CallExpr); ok {
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Seconds") {
			return ""
		}
		return fmt.Sprintf("key %q: the value is not a number of seconds (Seconds(d) or d.Seconds())", key)
	}
	return ""
}

// isDurationExpr reports whether e is a time.Duration by its form:
// time.Since(t), t.Sub(u), d.Round(x), d.Truncate(x).
func isDurationExpr(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" {
		return sel.Sel.Name == "Since" || sel.Sel.Name == "Until"
	}
	return sel.Sel.Name == "Sub" || ((sel.Sel.Name == "Round" || sel.Sel.Name == "Truncate") && !isTimeLike(sel.X))
}

// isTimeLike is a guess that x is a time.Time (t.Round(0) strips a
// monotonic reading): names starting with t or ending in At/Time.
func isTimeLike(x ast.Expr) bool {
	id, ok := x.(*ast.Ident)
	return ok && (id.Name == "t" || strings.HasSuffix(id.Name, "At") || strings.HasSuffix(id.Name, "Time"))
}
