#include "deploy/supervisor.h"

#include <signal.h>

#include <chrono>
#include <thread>

namespace geodesic::deploy {

StatusOr<std::unique_ptr<Child>> Supervisor::Make(ProcessId who, std::vector<std::string> args,
                                                  const std::string& region, const std::string& log_name) const {
  std::vector<std::string> prefix = command_prefix_(region);
  args.insert(args.begin(), prefix.begin(), prefix.end());
  auto c = std::make_unique<Child>(who.Name(), std::move(args), log_dir_ + "/" + log_name + ".log");
  GD_RETURN_IF_ERROR(c->Start().Annotate("starting " + who.Name()));
  return c;
}

Status Supervisor::Start(ProcessId who, std::vector<std::string> args, const std::string& region) {
  started_as_[who] = {args, region};
  GD_ASSIGN_OR_RETURN(auto c, Make(who, std::move(args), region, who.Name()));
  who_[c.get()] = who;
  children_.push_back(std::move(c));
  return Status::Ok();
}

StatusOr<Child*> Supervisor::Replace(Child* dead, const std::vector<std::string>& args, const std::string& log_name) {
  const ProcessId who = Who(dead);
  const std::string region = started_as_.at(who).second;
  GD_ASSIGN_OR_RETURN(auto fresh, Make(who, args, region, log_name));
  Child* out = fresh.get();
  who_[out] = who;
  for (auto& slot : children_)
    if (slot.get() == dead) slot = std::move(fresh);
  who_.erase(dead);
  return out;
}

std::vector<Child*> Supervisor::Reap() {
  std::vector<Child*> ended;
  for (auto& c : children_) {
    bool was_running = c->running();
    if (c->Poll() && was_running) ended.push_back(c.get());
  }
  return ended;
}

bool Supervisor::AllEnded() const {
  for (auto& c : children_)
    if (c->running()) return false;
  return true;
}

void Supervisor::StopAll(int sig, double grace_s) {
  for (auto& c : children_) {
    c->Signal(sig);
    c->Signal(SIGCONT);  // a paused (fault-injected) process must run to act on it
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (std::chrono::steady_clock::now() < deadline) {
    bool any = false;
    for (auto& c : children_) any |= !c->Poll();
    if (!any) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& c : children_)
    if (!c->Poll()) c->Signal(SIGKILL);
  for (auto& c : children_)
    while (!c->Poll()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

Child* Supervisor::Find(const std::string& name) const {
  for (auto& c : children_)
    if (c->name() == name) return c.get();
  return nullptr;
}

nlohmann::json Supervisor::Pids() const {
  nlohmann::json pids = nlohmann::json::object();
  for (auto& c : children_) pids[c->name()] = c->pid();
  return pids;
}

}  // namespace geodesic::deploy
