package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func completionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh",
		Short: "print a shell completion script (commands, flags, -o formats, domain names)",
		Long: "completion prints a script that completes ferryctl's commands, flags, output formats and\n" +
			"(asking ferryd) domain names. Load it with:\n\n" +
			"  bash: source <(ferryctl completion bash)   or save it in /etc/bash_completion.d/ferryctl\n" +
			"  zsh:  source <(ferryctl completion zsh)    or save it as _ferryctl in a directory of $fpath",
		ValidArgs: []cobra.Completion{"bash", "zsh"},
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
				return usageError(fmt.Sprintf("completion needs a shell, bash or zsh, got %q", args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if args[0] == "bash" {
				return c.Root().GenBashCompletionV2(c.OutOrStdout(), true)
			}
			return c.Root().GenZshCompletion(c.OutOrStdout())
		},
	}
}
