package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/signing"
)

type keygenOptions struct {
	out    string // -o: write a new key here
	public string // -y: print the public key of this key file
}

func newKeygenCmd(a *app) *cobra.Command {
	var o keygenOptions
	c := &cobra.Command{
		Use:   "keygen -o FILE | -y FILE",
		Short: "Create a signing key (-o) or print the public key of one (-y)",
		Long: `keygen -o FILE writes a new ed25519 signing key to FILE (mode 0600; an existing file
is never replaced) and prints its public key on one line. Give the key to the agent
(signing.key_file) and the public key to every reader (signing.trusted_keys): with it,
nothing in the store that this key did not sign is listed as ok, restored, drilled or copied.
keygen -y FILE prints the public key of an existing key. See docs/security.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runKeygen(a, o)
		},
	}
	c.Flags().StringVarP(&o.out, "output", "o", "", "write a new signing key to this file (0600)")
	c.Flags().StringVarP(&o.public, "public", "y", "", "print the public key of this signing key file")
	return c
}

func runKeygen(a *app, o keygenOptions) error {
	switch {
	case (o.out == "") == (o.public == ""):
		return usagef("give either -o FILE (a new key) or -y FILE (the public key of one)")
	case o.public != "":
		k, err := signing.LoadKey(o.public)
		if err != nil {
			return usageError{err}
		}
		fmt.Fprintln(a.stdout, k.Public())
		return nil
	}
	k, err := signing.Generate()
	if err != nil {
		return err
	}
	if err := signing.WriteKey(o.out, k); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, k.Public())
	return nil
}
