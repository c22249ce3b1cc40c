// A configuration file a replica re-reads when it changes (the authz
// policy, the client CRL): it remembers what it last saw (device, inode,
// size, mtime, and the bytes) so that a poll or a SIGHUP loads a file only
// when it really changed. A Kubernetes ConfigMap/Secret update swaps a
// symlink: stat follows it, so the swap counts as a change. Not
// thread-safe: its owner serializes calls.
#ifndef TURNSTILE_SERVER_WATCHED_FILE_H_
#define TURNSTILE_SERVER_WATCHED_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace turnstile {

class WatchedFile {
 public:
  explicit WatchedFile(std::string path) : path_(std::move(path)) {}
  // The whole file (NOT_FOUND naming the file if it cannot be read). It is
  // remembered as seen.
  absl::StatusOr<std::string> ReadNow();
  // The file's bytes if they differ from the last ones seen; nullopt if the
  // file looks untouched (stat unchanged, unless `force`), or was touched
  // but holds the same bytes. An unreadable file is an error, reported once
  // per change of its stat.
  absl::StatusOr<std::optional<std::string>> Changed(bool force);
  const std::string& path() const { return path_; }

 private:
  struct Seen {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    int64_t mtime_ns = -1;
    bool operator==(const Seen& o) const {
      return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
    }
  };
  Seen Stat() const;

  const std::string path_;
  Seen seen_;
  std::string content_;
};

}  // namespace turnstile

#endif  // TURNSTILE_SERVER_WATCHED_FILE_H_
