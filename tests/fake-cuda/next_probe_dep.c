/* The object after next_probe.c in its search order (see there). */
int probe_symbol(void) { return 2; }
