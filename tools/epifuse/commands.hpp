#pragma once
/// The `epifuse` subcommands (docs/design.md §7).
///
/// Each subcommand lives in its own file and exposes one function that registers it
/// on the application: it adds a CLI::App subcommand, binds its options to a struct
/// it owns (held by a shared_ptr captured in the callback) and sets a callback that
/// does the work. Callbacks report failure by throwing epifuse errors (main maps
/// them to exit codes) or, for "ran fine but the check failed", by setting
/// session().exit_code = k_exit_target_failed.
///
/// To add a subcommand: write tools/epifuse/NAME.cpp defining `void add_NAME(CLI::App&)`,
/// declare it here and list it in k_commands below (order = order in --help).
#include <CLI/CLI.hpp>

namespace epifuse::cli {

void add_validate(CLI::App& app);
void add_run(CLI::App& app);
void add_emit(CLI::App& app);
void add_compile(CLI::App& app);
void add_bench(CLI::App& app);
void add_tune(CLI::App& app);
void add_cache(CLI::App& app);
void add_info(CLI::App& app);
void add_grad(CLI::App& app);

using AddCommand = void (*)(CLI::App&);
inline constexpr AddCommand k_commands[] = {
    add_validate,
    add_emit,
    add_compile,
    add_run,
    add_grad,
    add_bench,
    add_tune,
    add_cache,
    add_info,
};

}  // namespace epifuse::cli
