# An unknown option: one line naming it, exit 2.
ss-cat --no-such-option
