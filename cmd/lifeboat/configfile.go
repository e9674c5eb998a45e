package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/scrub"
)

// decodeConfigFile strictly decodes YAML into c: unknown keys (with the
// nearest known one) and wrong types (in words) are errors naming the key
// and line. Durations and sizes are read by the same parsers as
// environment and flags (1d, 8MiB), not YAML's. It returns the line of
// every key in the file, for the errors Validate finds later.
func decodeConfigFile(data []byte, c *Config) (map[string]int, error) {
	lines := map[string]int{}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		return lines, nil // empty file
	}
	if err != nil {
		return nil, yamlError(err, lines)
	}
	leaves := map[string]option{}
	for _, o := range options(c) {
		leaves[o.key] = o
	}
	if err := prepareNode(&doc, "", leaves, lines, 0); err != nil {
		return nil, err
	}
	if err := doc.Decode(c); err != nil {
		return nil, yamlError(err, lines)
	}
	return lines, nil
}

// prepareNode walks the YAML tree against the config's keys: an unknown
// key is an error (the decoder's KnownFields, which Node.Decode lacks),
// a value of the wrong type is one in words, and a duration, size or
// boolean leaf is parsed with the option's own parser and rewritten into
// the form YAML's decoder takes. It records each key's line in lines.
func prepareNode(n *yaml.Node, prefix string, leaves map[string]option, lines map[string]int, depth int) error {
	if depth > 16 {
		return &ConfigError{Key: prefix, Line: n.Line, Err: errors.New("nested too deeply")}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := prepareNode(c, prefix, leaves, lines, depth+1); err != nil {
				return err
			}
		}
		return nil
	case yaml.AliasNode:
		if n.Alias != nil {
			return prepareNode(n.Alias, prefix, leaves, lines, depth+1)
		}
		return nil
	case yaml.MappingNode:
	default:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil // an empty section
		}
		if prefix == "" {
			return &ConfigError{Line: n.Line, Err: fmt.Errorf("want keys (cluster: …, etcd: …), not %s", describeNode(n))}
		}
		return &ConfigError{Key: prefix, Line: n.Line, Err: fmt.Errorf("want a section of keys indented below it, not %s", describeNode(n))}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" && k.Tag == "!!merge" {
			if err := prepareNode(v, prefix, leaves, lines, depth+1); err != nil {
				return err
			}
			continue
		}
		key := k.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		if _, seen := lines[key]; !seen {
			lines[key] = k.Line
		}
		if o, ok := leaves[key]; ok {
			if key == "copies" {
				if err := checkCopyKeys(v, lines); err != nil {
					return err
				}
				continue
			}
			if err := prepareLeaf(key, o.field.Type(), isSecret(o.field.Type()), v); err != nil {
				return err
			}
			continue
		}
		if !isSection(key, leaves) {
			return unknownKey(key, k.Line, leaves)
		}
		if err := prepareNode(v, key, leaves, lines, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// isSection reports whether key is a section of the configuration (etcd,
// store.s3): the prefix of a key.
func isSection(key string, leaves map[string]option) bool {
	for l := range leaves {
		if strings.HasPrefix(l, key+".") {
			return true
		}
	}
	return false
}

// unknownKey is the error of a key at line that is none of the
// configuration's, with the nearest known key: a sibling spelt alike
// (retention.keep_lst: retention.keep_last), else a key of that name in
// another section (keep_last at the top: retention.keep_last).
func unknownKey(key string, line int, leaves map[string]option) error {
	var known []string
	for l := range leaves {
		for i := range l {
			if l[i] == '.' {
				known = append(known, l[:i]) // its sections
			}
		}
		known = append(known, l)
	}
	return &ConfigError{Key: key, Line: line, Err: unknownKeyErr(key, known)}
}

// unknownKeyErr says key is unknown, and which of known (full key paths)
// it may have meant.
func unknownKeyErr(key string, known []string) error {
	prefix, name := "", key
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		prefix, name = key[:i+1], key[i+1:]
	}
	var siblings, elsewhere []string
	for _, k := range known {
		p, n := "", k
		if i := strings.LastIndexByte(k, '.'); i >= 0 {
			p, n = k[:i+1], k[i+1:]
		}
		if p == prefix {
			siblings = append(siblings, n)
		} else if !strings.Contains(p, "[") {
			elsewhere = append(elsewhere, k)
		}
	}
	if m := nearest(name, siblings, func(s string) string { return s }); m != "" {
		return fmt.Errorf("unknown key, did you mean %s%s?", prefix, m)
	}
	if m := nearest(name, elsewhere, func(s string) string { return s[strings.LastIndexByte(s, '.')+1:] }); m != "" {
		return fmt.Errorf("unknown key, did you mean %s?", m)
	}
	return errors.New("unknown key")
}

// nearest is the candidate whose name (by name) is nearest to s by edit
// distance (case, - and _ aside), "" when none is near enough to be a
// slip of the keyboard; the first of equals, in sorted order.
func nearest(s string, candidates []string, name func(string) string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	s = norm(s)
	limit := min(3, max(1, len(s)/3))
	best, bestD := "", limit+1
	sorted := slices.Clone(candidates)
	slices.Sort(sorted)
	for _, c := range sorted {
		if d := editDistance(s, norm(name(c))); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and transpositions of neighbours
// (keep_dialy is one slip from keep_daily).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 64 // far: no suggestion for a long key
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// describeNode names what a YAML value is, for an error: its text
// quoted, or a list, or a section.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a section of keys"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "an alias"
}

// prepareLeaf checks a leaf value against its field's type t, in words,
// and rewrites a duration, size, whole number or boolean parsed as the
// environment and flags do into its canonical form (a Go duration, a
// decimal integer, true or false). A secret's value is never echoed.
func prepareLeaf(key string, t reflect.Type, secret bool, v *yaml.Node) error {
	for i := 0; v.Kind == yaml.AliasNode && v.Alias != nil && v.Alias != v && i < 16; i++ {
		v = v.Alias
	}
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	wrong := func(format string, a ...any) error {
		return &ConfigError{Key: key, Line: v.Line, Err: fmt.Errorf(format, a...)}
	}
	if t.Kind() == reflect.Slice {
		switch v.Kind {
		case yaml.SequenceNode:
		case yaml.ScalarNode:
			example := v.Value
			if secret {
				example = "https://…"
			}
			return wrong("want a list, e.g. [%s]", example)
		default:
			return wrong("want a list, not %s", describeNode(v))
		}
		for i, e := range v.Content {
			for j := 0; e.Kind == yaml.AliasNode && e.Alias != nil && j < 16; j++ {
				e = e.Alias
			}
			if e.Kind != yaml.ScalarNode {
				return &ConfigError{Key: key, Line: e.Line, Err: fmt.Errorf("entry %d: want one value, not %s", i+1, describeNode(e))}
			}
		}
		return nil
	}
	if v.Kind != yaml.ScalarNode {
		return wrong("want one value, not %s", describeNode(v))
	}
	switch {
	case t == durationType || t == timeDurationType:
		d, err := retention.ParseDuration(v.Value)
		if err != nil {
			return wrong("%s", notA(t, v.Value))
		}
		v.Value, v.Tag, v.Style = time.Duration(d).String(), "!!str", 0
	case t == percentType:
		if _, err := scrub.ParsePercent(v.Value); err != nil {
			return wrong("%v", err)
		}
	case t.Kind() == reflect.Bool:
		if v.Tag == "!!bool" {
			return nil
		}
		b, err := strconv.ParseBool(v.Value)
		if err != nil {
			return wrong("%s", notA(t, v.Value))
		}
		v.Value, v.Tag, v.Style = strconv.FormatBool(b), "!!bool", 0
	case t.Kind() == reflect.Int64 || t.Kind() == reflect.Int:
		if v.Tag == "!!int" {
			return nil // YAML's own integers (0x10, 1_000): the decoder's
		}
		n, err := parseSize(v.Value)
		if err != nil || (t.Kind() == reflect.Int && !isWhole(v.Value)) {
			return wrong("%s", notA(t, v.Value))
		}
		v.Value, v.Tag, v.Style = strconv.FormatInt(n, 10), "!!int", 0
	}
	return nil
}

// isWhole reports whether s is a plain integer (not a size with a unit).
func isWhole(s string) bool {
	_, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return err == nil
}

// notA is the error text of a value s that a field of type t cannot
// take, in words: the one wording of the file, the environment and flags.
func notA(t reflect.Type, s string) string {
	switch {
	case t == durationType || t == timeDurationType:
		return fmt.Sprintf("%q is not a duration, e.g. 30m or 7d", s)
	case t.Kind() == reflect.Bool:
		return fmt.Sprintf("%q is not true or false", s)
	case t.Kind() == reflect.Int64:
		return fmt.Sprintf("%q is not a size, e.g. 8MiB", s)
	case t.Kind() == reflect.Int:
		return fmt.Sprintf("%q is not a whole number", s)
	}
	return fmt.Sprintf("%q cannot be set from text", s)
}

var (
	yamlLineRE = regexp.MustCompile(`line (\d+): (.*)`)
	// yamlTypeRE is go-yaml's type error: cannot unmarshal !!str `five` into int.
	yamlTypeRE = regexp.MustCompile("cannot unmarshal (!!\\w+)(?: `([^`]*)`)? into (.*)$")
)

// yamlError turns a YAML decoding error into one ConfigError at its line,
// naming the key whose value starts there (lines), in words: what
// prepareNode did not catch, and syntax errors.
func yamlError(err error, lines map[string]int) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	m := yamlLineRE.FindStringSubmatch(msg)
	if m == nil {
		return &ConfigError{Err: errors.New(msg)}
	}
	line, _ := strconv.Atoi(m[1])
	detail := m[2]
	if t := yamlTypeRE.FindStringSubmatch(detail); t != nil {
		got := map[string]string{"!!seq": "a list", "!!map": "a section of keys"}[t[1]]
		if got == "" {
			got = strconv.Quote(t[2])
		}
		want := "another kind of value"
		switch {
		case strings.HasPrefix(t[3], "[]"):
			want = "a list"
		case strings.HasPrefix(t[3], "main."):
			want = "a section of keys"
		case t[3] == "string":
			want = "one value"
		}
		detail = fmt.Sprintf("want %s, not %s", want, got)
	}
	var key string
	for k, l := range lines {
		if l == line && (key == "" || len(k) > len(key) || (len(k) == len(key) && k < key)) {
			key = k // the innermost key on that line
		}
	}
	return &ConfigError{Key: key, Line: line, Err: errors.New(detail)}
}

// LoadConfig builds the effective configuration: defaults, then the file
// (when path is not empty), then environment (getenv), then flags. An
// error names where the wrong value is: the file and line, the
// environment variable or the flag.
func LoadConfig(path string, getenv func(string) string, flags map[string]string) (*Config, error) {
	c, _, err := loadConfig(path, getenv, flags)
	return c, err
}

// origin is where a key's value came from: a line of the file, an
// environment variable or a flag.
type origin struct {
	line      int
	env, flag string
}

// origins are the origins of the keys set by the file, the environment
// and flags; keys left at their defaults have none.
type origins struct {
	file string
	keys map[string]origin
}

// set records that key's value came from o, replacing what the file said
// of it and its parts (a list of copies from LIFEBOAT_COPIES).
func (s *origins) set(key string, o origin) {
	for k := range s.keys {
		if strings.HasPrefix(k, key+".") || strings.HasPrefix(k, key+"[") {
			delete(s.keys, k)
		}
	}
	s.keys[key] = o
}

// locate gives a *ConfigError without a place the origin of its key (or,
// for a copy's key, of the copy or the list): the file and line, the
// variable or the flag.
func (s *origins) locate(err error) error {
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.File != "" || ce.Env != "" || ce.Flag != "" {
		return err
	}
	for key := ce.Key; key != ""; {
		if o, ok := s.keys[key]; ok {
			ce.Env, ce.Flag = o.env, o.flag
			if o.env == "" && o.flag == "" {
				ce.File, ce.Line = s.file, o.line
			}
			return err
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 || !strings.Contains(key, "[") {
			break // a key of a section is not placed at its section
		}
		key = key[:i]
	}
	return err
}

// loadConfig is LoadConfig, with where each value came from.
func loadConfig(path string, getenv func(string) string, flags map[string]string) (*Config, *origins, error) {
	c := DefaultConfig()
	from := &origins{file: path, keys: map[string]origin{}}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, &ConfigError{Err: fmt.Errorf("read config file: %w", err)}
		}
		lines, err := decodeConfigFile(data, &c)
		if err != nil {
			var ce *ConfigError
			if errors.As(err, &ce) {
				ce.File = path
			}
			return nil, nil, err
		}
		for k, l := range lines {
			from.keys[k] = origin{line: l}
		}
	}
	fileStore := c.Store.URL
	opts := options(&c)
	for _, o := range opts {
		for _, name := range o.envNames() {
			v := getenv(name)
			if v == "" {
				continue
			}
			from.set(o.key, origin{env: name})
			if err := o.set(v); err != nil {
				return nil, nil, from.locate(err)
			}
			break
		}
	}
	byKey := map[string]option{}
	for _, o := range opts {
		byKey[o.key] = o
	}
	keys := make([]string, 0, len(flags))
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o, ok := byKey[k]
		if !ok {
			return nil, nil, cfgErr(k, "unknown key")
		}
		from.set(k, origin{flag: o.Flag})
		if err := o.set(flags[k]); err != nil {
			return nil, nil, from.locate(err)
		}
	}
	c.normalize()
	if c.Store.URL != fileStore {
		c.storeIsCopy()
	}
	if err := c.Validate(); err != nil {
		return nil, nil, from.locate(err)
	}
	return &c, from, nil
}

// Redacted renders the configuration as YAML with secrets replaced.
func (c *Config) Redacted() (string, error) {
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
