#include "core/subprocess.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

extern char** environ;

namespace syslm {

ProcessResult run_process(const std::vector<std::string>& argv, const std::string& stderr_path) {
    SYSLM_CHECK(!argv.empty(), "run_process: no program");
    int pipe_fd[2];
    SYSLM_CHECK(pipe(pipe_fd) == 0, "run_process: pipe: ", std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fd[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, pipe_fd[0]);
    posix_spawn_file_actions_addclose(&actions, pipe_fd[1]);
    if (!stderr_path.empty())
        posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(pipe_fd[1]);
    if (rc != 0) {
        close(pipe_fd[0]);
        fail("cannot start ", argv[0], ": ", std::strerror(rc));
    }
    ProcessResult r;
    char buf[4096];
    for (;;) {
        const ssize_t n = read(pipe_fd[0], buf, sizeof buf);
        if (n > 0) {
            r.out.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
            break;
        }
    }
    close(pipe_fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

std::string self_executable() {
    return std::filesystem::read_symlink("/proc/self/exe").string();
}

}  // namespace syslm
