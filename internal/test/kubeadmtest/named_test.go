package kubeadmtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryNodeTestIsNamed: make test runs the node's tests in a track of
// their own (scripts/go-tests.sh: -run NODE_TESTS) and skips them in
// the other (-skip NODE_TESTS). A test that starts a node under another
// name would run in the main track too, and an e2e package that waits on
// the node lock would again be the long pole. Every test function of the
// repository that calls Start (kubeadmtest.Start) must match NODE_TESTS.
func TestEveryNodeTestIsNamed(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	script, err := os.ReadFile(filepath.Join(root, "scripts", "go-tests.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^NODE_TESTS='([^']+)'$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/go-tests.sh: no NODE_TESTS='...' line")
	}
	named := regexp.MustCompile(string(m[1]))
	found := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".bin" || d.Name() == ".git" || d.Name() == "bench-out") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, fn := range nodeStarters(t, path) {
			found++
			if !named.MatchString(fn) {
				t.Errorf("%s: %s starts a kubeadm node but does not match NODE_TESTS %s of scripts/go-tests.sh: rename it (e.g. TestKubeadm...)", path, fn, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 3 {
		t.Fatalf("found %d node tests; TestNode, TestKubeadmRestore and TestKubeadmInstall at least: the scan is broken", found)
	}
}

// nodeStarters returns the Test functions of the file at path that call
// Start (in this package) or kubeadmtest.Start.
func nodeStarters(t *testing.T, path string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var names []string
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch f := call.Fun.(type) {
			case *ast.SelectorExpr:
				if x, ok := f.X.(*ast.Ident); ok && x.Name == "kubeadmtest" && f.Sel.Name == "Start" {
					names = append(names, fn.Name.Name)
					return false
				}
			case *ast.Ident:
				if f.Name == "Start" && strings.Contains(path, "kubeadmtest") {
					names = append(names, fn.Name.Name)
					return false
				}
			}
			return true
		})
	}
	return names
}
