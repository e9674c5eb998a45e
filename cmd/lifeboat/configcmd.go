package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newConfigCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "Inspect the configuration",
	}
	c.AddCommand(&cobra.Command{
		Use:   "check",
		Short: "Validate the configuration and print the effective values, secrets redacted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConfigCheck(a)
		},
	})
	return c
}

func runConfigCheck(a *app) error {
	cfg, err := a.config()
	if err != nil {
		return err
	}
	if _, err := encodingFromConfig(cfg); err != nil {
		return err
	}
	out, err := cfg.Redacted()
	if err != nil {
		return err
	}
	fmt.Fprint(a.stdout, "# effective configuration (secrets redacted)\n"+out)
	return nil
}
