# ss.bash — bash completion of the ss-* tools (installed by `make install` as
# share/bash-completion/completions/ss-TOOL, one name per tool).
#
# It reads what it offers from the tool itself, so that it never disagrees with the binary:
# the options from `TOOL [COMMAND] --help` (the common ones printed from the one table of
# tools/cli.c, the tool's own beside them), the commands of ss-retrieve and ss-eval from their
# usage lines, and the values an option's help lists as "A, B, C or D" (--weights-dtype:
# "f32, bf16, f16, q8_0 or auto"); any other argument completes as a path.

# _ss_help TOOL [COMMAND]: the tool's help, from a cache (one run per shell and command).
_ss_help()
{
	local key=${*// /_}
	key=${key//[^A-Za-z0-9_]/_}
	local var=_ss_help_$key
	if [[ -z ${!var-} ]]; then
		printf -v "$var" '%s' "$("$@" --help 2>/dev/null)"
	fi
	printf '%s\n' "${!var}"
}

_ss_complete()
{
	local tool=${COMP_WORDS[0]} cur=${COMP_WORDS[COMP_CWORD]} prev= cmd= i
	((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
	COMPREPLY=()
	# The commands: "usage: ss-retrieve add|build ..." / "       ss-eval wikitext ...".
	local cmds
	cmds=$(_ss_help "$tool" | sed -n 's/^\(usage:\)\{0,1\} *ss-[a-z]* \([a-z][a-z|]*\)\( .*\)\{0,1\}$/\2/p' | tr '|' ' ')
	if [[ -n $cmds ]]; then
		if ((COMP_CWORD == 1)); then
			mapfile -t COMPREPLY < <(compgen -W "$cmds" -- "$cur")
			return
		fi
		cmd=${COMP_WORDS[1]}
	fi
	local help
	help=$(_ss_help "$tool" $cmd)
	# The option before the cursor takes an argument when its help entry names one
	# ("  --mode MODE", "  -o, --output FILE"): offer the values its help lists, else paths.
	if [[ $prev == -* && $prev != *=* ]]; then
		local entry
		entry=$(printf '%s\n' "$help" | awk -v o="$prev" '
			/^  -/ { on = 0; n = split($0, w, /[ ,]+/)
				for (i = 1; i <= n; i++) if (w[i] == o) on = (w[i + 1] ~ /^[A-Z][A-Z0-9_.]*$/) }
			on && (/^  -/ || /^     /)')
		if [[ -n $entry ]]; then
			local vals # a list in the help: "f32, bf16, f16, q8_0 or auto"
			vals=$(printf '%s\n' "$entry" | tr '\n' ' ' | sed 's/  */ /g' |
				grep -oE '[a-z][a-z0-9_-]*(, [a-z][a-z0-9_-]*)+,? or [a-z][a-z0-9_-]*' | head -n 1 |
				sed 's/,* or /, /' | tr -d ',')
			if [[ -n $vals ]]; then
				mapfile -t COMPREPLY < <(compgen -W "$vals" -- "$cur")
			else
				mapfile -t COMPREPLY < <(compgen -f -- "$cur")
				compopt -o filenames 2>/dev/null
			fi
			return
		fi
	fi
	if [[ $cur == -* ]]; then
		local opts
		opts=$(printf '%s\n' "$help" | grep -oE '(^|[ ,[])--?[A-Za-z][A-Za-z0-9-]*' | sed 's/^[ ,[]//' | sort -u)
		mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
		return
	fi
	mapfile -t COMPREPLY < <(compgen -f -- "$cur")
	compopt -o filenames 2>/dev/null
}

complete -F _ss_complete ss-tokenize ss-encode ss-retrieve ss-compose ss-decode ss-score ss-cat ss-eval ss-train
