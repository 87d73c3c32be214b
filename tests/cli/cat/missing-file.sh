# A file that is not there: one line naming it, exit 1.
ss-cat no-such.states
