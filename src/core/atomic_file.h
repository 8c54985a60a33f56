// Writing a file so that nobody ever sees half of it: every file kiln writes (safetensors,
// checkpoints, training logs and charts, run configurations) goes through here.
//
//   kiln::detail::AtomicFile file("runs/x/model-3.safetensors", "save_safetensors");
//   file.write(header);
//   file.write(data);
//   file.commit();        // the target now holds exactly header + data
//
// The bytes go to a fresh temporary beside the target (a random name created with
// O_CREAT|O_EXCL|O_NOFOLLOW, so a planted file or symbolic link is never opened or followed),
// which is flushed to the disk (fsync) and then renamed over the target; the directory is synced
// last so the rename itself survives a crash. Readers and concurrent writers of the same target
// each see one whole file, the old or one of the new. The temporary is created with mode 0666
// less the umask, as any newly created file is. It is removed on any failure and when the
// object is destroyed without commit(). Every failure is InvalidArgument naming the op, the
// target, the step that failed and the system's reason.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace kiln::detail {

class AtomicFile {
 public:
  // Creates the temporary in target's directory.
  AtomicFile(std::filesystem::path target, std::string_view op);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::span<const std::byte> bytes);
  void write(std::string_view text);
  // Syncs the temporary, renames it over the target and syncs the directory.
  void commit();

  // The temporary's path while one exists (empty after commit or a failure); for tests.
  const std::filesystem::path& temporary() const noexcept { return temporary_; }

 private:
  [[noreturn]] void fail(std::string_view step, int error);
  void discard() noexcept;

  std::filesystem::path target_;
  std::filesystem::path temporary_;
  std::string op_;
  int fd_ = -1;
};

// The whole content at once: AtomicFile, one write, commit.
void write_file_atomically(const std::filesystem::path& target, std::string_view content,
                           std::string_view op);

}  // namespace kiln::detail
