#include "server/watched_file.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace turnstile {

WatchedFile::Seen WatchedFile::Stat() const {
  struct stat st {};
  Seen now;
  if (::stat(path_.c_str(), &st) == 0) {
    now.dev = st.st_dev;
    now.ino = st.st_ino;
    now.size = st.st_size;
    now.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  return now;
}

absl::StatusOr<std::string> WatchedFile::ReadNow() {
  // Stat first: a change racing with the read is seen again next time.
  seen_ = Stat();
  std::ifstream in(path_, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path_));
  std::ostringstream ss;
  ss << in.rdbuf();
  content_ = ss.str();
  return content_;
}

absl::StatusOr<std::optional<std::string>> WatchedFile::Changed(bool force) {
  const Seen now = Stat();
  if (!force && now == seen_) return std::optional<std::string>();
  const std::string before = content_;
  absl::StatusOr<std::string> text = ReadNow();
  if (!text.ok()) return text.status();
  if (*text == before) return std::optional<std::string>();  // touched, not changed
  return std::optional<std::string>(*text);
}

}  // namespace turnstile
