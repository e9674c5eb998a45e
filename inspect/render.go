package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Apply says how Render prepares an object for `kubectl apply` (see
// ForApply).
type Apply struct {
	// KeepOwnerReferences keeps metadata.ownerReferences, which ForApply
	// drops otherwise.
	KeepOwnerReferences bool
}

// Render formats a decoded value: "yaml" or "json" (the object; with a
// non-nil apply, stripped of the fields the API server sets, see
// ForApply, and it returns the owner references it dropped), or "raw"
// (the value's bytes: the plaintext when it was decrypted, else as
// stored). A value that is not an object renders, in yaml and json, as a
// document holding its key, size and bytes; one that could not be
// decrypted or decoded returns Value.Err.
func Render(v Value, format string, apply *Apply) ([]byte, []Owner, error) {
	if format == "raw" {
		return v.Raw, nil, nil
	}
	js := v.JSON
	var dropped []Owner
	if js == nil {
		if v.Err != nil {
			return nil, nil, fmt.Errorf("%w (-o raw prints the value's bytes)", v.Err)
		}
		if apply != nil {
			return nil, nil, fmt.Errorf("%s is a %s value of %d bytes, not a Kubernetes object: nothing to apply (use -o raw)", v.Key, v.Format, len(v.Raw))
		}
		doc := map[string]any{"key": v.Key, "format": v.Format, "size": len(v.Raw)}
		if utf8.Valid(v.Raw) {
			doc["value"] = string(v.Raw)
		} else {
			doc["value_base64"] = v.Raw // encoding/json writes []byte as base64
		}
		var err error
		if js, err = json.Marshal(doc); err != nil {
			return nil, nil, err
		}
	} else if apply != nil {
		var err error
		if js, dropped, err = ForApply(js, apply.KeepOwnerReferences); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", v.Key, err)
		}
	}
	if format == "json" {
		var b bytes.Buffer
		if err := json.Indent(&b, js, "", "  "); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", v.Key, err)
		}
		b.WriteByte('\n')
		return b.Bytes(), dropped, nil
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", v.Key, err)
	}
	return y, dropped, nil
}

// UnifiedDiff returns a unified diff (3 lines of context) from a to b,
// empty when they are equal.
func UnifiedDiff(aName, bName string, a, b []byte) string {
	al, bl := splitLines(a), splitLines(b)
	// The longest common subsequence by dynamic programming: objects are
	// small (hundreds of lines); beyond 4000 lines each, say so instead.
	if len(al) > 4000 || len(bl) > 4000 {
		return fmt.Sprintf("--- %s\n+++ %s\n(objects of %d and %d lines: too long to diff here)\n", aName, bName, len(al), len(bl))
	}
	return hunks(aName, bName, diffOps(al, bl))
}

// diffOp is one line of a diff: kept, removed or added.
type diffOp struct {
	kind byte // ' ', '-', '+'
	line string
	ai   int // line numbers (1-based) after this op
	bi   int
}

// diffOps is the edit script from al to bl along their longest common
// subsequence.
func diffOps(al, bl []string) []diffOp {
	n, m := len(al), len(bl)
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if al[i] == bl[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && al[i] == bl[j]:
			ops = append(ops, diffOp{' ', al[i], i, j})
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			ops = append(ops, diffOp{'+', bl[j], i, j})
			j++
		default:
			ops = append(ops, diffOp{'-', al[i], i, j})
			i++
		}
	}
	return ops
}

// hunks is the unified diff of ops (3 lines of context), empty when
// nothing changed.
func hunks(aName, bName string, ops []diffOp) string {
	const ctx = 3
	var out strings.Builder
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		start := max(k-ctx, 0)
		end := k
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end = min(end+ctx, len(ops))
				break
			}
			end = run
		}
		if out.Len() == 0 {
			fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
		}
		var ac, bc int
		for _, o := range ops[start:end] {
			if o.kind != '+' {
				ac++
			}
			if o.kind != '-' {
				bc++
			}
		}
		fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n", ops[start].ai+1, ac, ops[start].bi+1, bc)
		for _, o := range ops[start:end] {
			out.WriteByte(o.kind)
			out.WriteString(o.line)
			out.WriteByte('\n')
		}
		k = end
	}
	return out.String()
}

func splitLines(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
