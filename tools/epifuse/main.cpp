// Placeholder entry point, replaced by the CLI subcommands.
#include <cstdio>
int main() { std::puts("epifuse: CLI not built yet"); return 0; }
