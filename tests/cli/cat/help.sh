# --help: the usage on stdout, exit 0.
ss-cat --help
