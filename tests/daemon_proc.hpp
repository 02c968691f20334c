// hcaemud started by a test on its own net_ring0 (frames loop back: its clients reach each other),
// on a temp socket, stopped by its PID. $HCAEMUD names the binary (set by meson).
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace hcaemu::test {

// hcaemud on a temp socket, on its own net_ring0 (frames loop back: two clients reach each other).
class Daemon {
public:
    explicit Daemon(std::string prefix = "mem") : prefix_(std::move(prefix)) {
        const char* exe = std::getenv("HCAEMUD");
        if (!exe) {
            err_ = "HCAEMUD is not set (the meson test sets it to the built hcaemud)";
            return;
        }
        char tmpl[] = "/tmp/hcaemu-mem-XXXXXX";
        if (!::mkdtemp(tmpl)) {
            err_ = "mkdtemp failed";
            return;
        }
        dir_ = tmpl;
        sock_ = dir_ + "/hcaemud.sock";
        const std::string eal = "--no-huge -m 256 --no-pci --no-shconf -l 0 --no-telemetry --log-level lib.eal:error "
                                "--file-prefix hcaemud-" + prefix_ + "-" + std::to_string(::getpid()) + " --vdev=net_ring0";
        std::vector<std::string> args = {exe, "--socket", sock_, "--eal", eal, "--ip", "198.18.0.1/24"};
        std::vector<char*> argv;
        for (auto& s : args) argv.push_back(s.data());
        argv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, (dir_ + "/hcaemud.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        const int rc = posix_spawn(&pid_, exe, &fa, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) {
            err_ = std::string("posix_spawn ") + exe + ": " + std::strerror(rc);
            pid_ = 0;
            return;
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (std::chrono::steady_clock::now() < deadline) {
            if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
                pid_ = 0;
                err_ = "hcaemud exited at start: " + log();
                return;
            }
            const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
            sockaddr_un sa{};
            sa.sun_family = AF_UNIX;
            std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_.c_str());
            const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
            ::close(fd);
            if (ok) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        err_ = "hcaemud did not listen within 30 s: " + log();
    }
    ~Daemon() {
        if (pid_ > 0) {
            ::kill(pid_, SIGTERM);
            for (int i = 0; i < 200 && ::waitpid(pid_, nullptr, WNOHANG) != pid_; ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        if (!dir_.empty()) {
            std::remove((dir_ + "/hcaemud.log").c_str());
            ::rmdir(dir_.c_str());
        }
    }
    bool ok() const { return pid_ > 0 && err_.empty(); }
    const std::string& err() const { return err_; }
    const std::string& sock() const { return sock_; }
    std::string log() const {
        std::ifstream f(dir_ + "/hcaemud.log");
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str();
    }

private:
    std::string prefix_;
    pid_t pid_ = 0;
    std::string dir_, sock_, err_;
};


}  // namespace hcaemu::test
