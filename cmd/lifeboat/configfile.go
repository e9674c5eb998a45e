package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lifeboat-dev/lifeboat/retention"
)

// decodeConfigFile strictly decodes YAML into c: unknown keys and wrong
// types are errors naming the key and line. Durations and sizes are read
// by the same parsers as environment and flags (1d, 8MiB), not YAML's.
func decodeConfigFile(data []byte, c *Config) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		return nil // empty file
	}
	if err != nil {
		return yamlError(data, err)
	}
	leaves := map[string]option{}
	for _, o := range options(c) {
		leaves[o.key] = o
	}
	if err := prepareNode(&doc, "", leaves, 0); err != nil {
		return err
	}
	if err := doc.Decode(c); err != nil {
		return yamlError(data, err)
	}
	return nil
}

// prepareNode walks the YAML tree against the config's keys: an unknown
// key is an error (the decoder's KnownFields, which Node.Decode lacks),
// and a duration or size leaf is parsed with the option's own parser and
// rewritten into the form YAML's decoder takes.
func prepareNode(n *yaml.Node, prefix string, leaves map[string]option, depth int) error {
	if depth > 16 {
		return &ConfigError{Key: prefix, Err: fmt.Errorf("line %d: nested too deeply", n.Line)}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := prepareNode(c, prefix, leaves, depth+1); err != nil {
				return err
			}
		}
		return nil
	case yaml.AliasNode:
		if n.Alias != nil {
			return prepareNode(n.Alias, prefix, leaves, depth+1)
		}
		return nil
	case yaml.MappingNode:
	default:
		return nil // a type error: the decoder reports it
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" && k.Tag == "!!merge" {
			if err := prepareNode(v, prefix, leaves, depth+1); err != nil {
				return err
			}
			continue
		}
		key := k.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		if o, ok := leaves[key]; ok {
			if key == "copies" {
				if err := checkCopyKeys(v); err != nil {
					return err
				}
				continue
			}
			if err := prepareLeaf(v, o); err != nil {
				return err
			}
			continue
		}
		known := false
		for l := range leaves {
			if strings.HasPrefix(l, key+".") {
				known = true
				break
			}
		}
		if !known {
			return &ConfigError{Key: key, Err: fmt.Errorf("line %d: unknown key", k.Line)}
		}
		if err := prepareNode(v, key, leaves, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// prepareLeaf parses a duration or size scalar as the environment and
// flags do and rewrites it canonically (a Go duration, a decimal integer).
func prepareLeaf(v *yaml.Node, o option) error {
	for v.Kind == yaml.AliasNode && v.Alias != nil && v.Alias != v {
		v = v.Alias
	}
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return nil
	}
	switch o.field.Interface().(type) {
	case Duration, time.Duration:
		d, err := retention.ParseDuration(v.Value)
		if err != nil {
			return &ConfigError{Key: o.key, Err: fmt.Errorf("line %d: %q is not a duration (like 30s, 36h, 1d, 2w)", v.Line, v.Value)}
		}
		v.Value, v.Tag, v.Style = time.Duration(d).String(), "!!str", 0
		return nil
	}
	if k := o.field.Kind(); (k == reflect.Int64 || k == reflect.Int) && v.Tag == "!!str" {
		n, err := parseSize(v.Value)
		if err != nil {
			return &ConfigError{Key: o.key, Err: fmt.Errorf("line %d: %q is not a number (sizes like 8MiB)", v.Line, v.Value)}
		}
		v.Value, v.Tag, v.Style = strconv.FormatInt(n, 10), "!!int", 0
	}
	return nil
}

var yamlLineRE = regexp.MustCompile(`line (\d+): (.*)`)

// yamlError turns a YAML decoding error into one ConfigError that names
// the key (yaml.v3 reports only line numbers for type errors).
func yamlError(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return &ConfigError{Err: fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "yaml: "))}
	}
	keys := map[int]string{} // line → key path whose value starts there
	var root yaml.Node
	if yaml.Unmarshal(data, &root) == nil {
		var walk func(prefix string, n *yaml.Node)
		walk = func(prefix string, n *yaml.Node) {
			switch n.Kind {
			case yaml.DocumentNode:
				for _, c := range n.Content {
					walk(prefix, c)
				}
			case yaml.MappingNode:
				for i := 0; i+1 < len(n.Content); i += 2 {
					key := n.Content[i].Value
					if prefix != "" {
						key = prefix + "." + key
					}
					keys[n.Content[i].Line] = key
					if _, seen := keys[n.Content[i+1].Line]; !seen {
						keys[n.Content[i+1].Line] = key
					}
					walk(key, n.Content[i+1])
				}
			}
		}
		walk("", &root)
	}
	msg := te.Errors[0]
	m := yamlLineRE.FindStringSubmatch(msg)
	if m == nil {
		return &ConfigError{Err: errors.New(msg)}
	}
	line, _ := strconv.Atoi(m[1])
	detail := strings.Replace(m[2], "cannot unmarshal", "cannot use", 1)
	key := keys[line]
	if strings.Contains(detail, "not found in type") {
		// "field foo not found in type main.EtcdConfig"
		if f := strings.Fields(detail); len(f) > 1 {
			if key == "" {
				key = f[1]
			}
			detail = "unknown key"
		}
	}
	return &ConfigError{Key: key, Err: fmt.Errorf("line %d: %s", line, detail)}
}

// LoadConfig builds the effective configuration: defaults, then the file
// (when path is not empty), then environment (getenv), then flags.
func LoadConfig(path string, getenv func(string) string, flags map[string]string) (*Config, error) {
	c := DefaultConfig()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, &ConfigError{Err: fmt.Errorf("read config file: %w", err)}
		}
		if err := decodeConfigFile(data, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
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
			if err := o.set(v); err != nil {
				return nil, fmt.Errorf("environment %s: %w", name, err)
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
			return nil, cfgErr(k, "unknown key")
		}
		if err := o.set(flags[k]); err != nil {
			return nil, err
		}
	}
	c.normalize()
	if c.Store.URL != fileStore {
		c.storeIsCopy()
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Redacted renders the configuration as YAML with secrets replaced.
func (c *Config) Redacted() (string, error) {
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
