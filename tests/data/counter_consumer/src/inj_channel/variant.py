# which cost inj_channel adds per message: clean | syscall | copy | pickle (set per commit)
VARIANT = "clean"
