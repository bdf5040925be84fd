#pragma once
// Writing a file so that it ends up either whole or as it was before.
//
// Note [Atomic output files]
// A file written in place is truncated first and filled after: a SIGINT in
// between, a full disk or a file-size limit leaves a short file where the
// previous good one was, and a reader cannot tell. So every file epifuse
// writes for a user (.npy outputs, --cubin) goes to a temporary file in the
// destination's directory, and only a complete, flushed temporary is renamed
// onto the destination (rename within one directory is atomic). On any
// failure the temporary is removed and the destination is untouched; a
// program that calls remove_temp_files_on_signal() also removes them when
// SIGINT, SIGTERM or SIGHUP ends it.
//
// The guarantee is against the process being stopped and against write
// errors, not against power loss: the directory is not synced after the
// rename. The temporary is synced before it, because some file systems (NFS,
// quotas) report a full disk only there.
#include <cstddef>
#include <filesystem>
#include <string_view>

namespace epifuse::io {

/// A file being replaced (Note [Atomic output files]). A destination that
/// is a symbolic link replaces the file the link points to and keeps the
/// link. A destination that exists and is not a regular file (/dev/null,
/// /dev/full, a FIFO) cannot be replaced by a rename and is written in place.
class AtomicFile {
 public:
  /// Creates the temporary beside `destination` (its mode: the destination's
  /// when that exists, else 0666 less the umask). UserError
  /// "<destination>: cannot write: <why>" when it cannot be created.
  explicit AtomicFile(std::filesystem::path destination);
  /// Removes the temporary unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `size` bytes. RuntimeError "<destination>: write failed: <why>"
  /// (a full disk, EFBIG past a file-size limit); the temporary is removed
  /// at once and later calls fail the same way.
  void write(const void* data, std::size_t size);
  /// Syncs and closes the temporary and renames it onto the destination.
  /// RuntimeError as write() when any step fails; the destination keeps its
  /// previous content then.
  void commit();

 private:
  void fail(int error);  // removes the temporary, throws RuntimeError
  void discard() noexcept;

  std::filesystem::path destination_;  // as the caller named it, for messages
  std::filesystem::path target_;       // the file the rename replaces (symbolic links followed)
  std::filesystem::path temp_;         // empty when writing in place
  int fd_ = -1;
  int slot_ = -1;  // in the signal registry; -1 when not registered
  int error_ = 0;  // the first write error
  bool committed_ = false;
};

/// The file a write to `path` replaces: `path` with the symbolic links of its
/// last component followed, as AtomicFile follows them.
std::filesystem::path replaced_file(const std::filesystem::path& path);

/// Writes `bytes` as the whole content of `path` through an AtomicFile.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove the
/// temporaries of the AtomicFiles being written and then end the process by
/// the same signal, as it would have ended without them. A signal that is
/// ignored when this is called stays ignored. For programs (the command
/// line): a library does not take its host's signals.
void remove_temp_files_on_signal();

}  // namespace epifuse::io
