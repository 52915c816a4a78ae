// What the C++ benchmarks print about the machine they ran on, so figures
// from different runs can be compared: kernel, CPU model, cores online and
// the load average (the machines are shared; a busy one skews every figure).
#pragma once

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace corvid::bench {

inline std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// "Linux 6.18.4, Intel(R) Xeon(R) Processor, 2 cores online, load average 0.52"
inline std::string MachineDescription() {
  utsname u;
  uname(&u);
  double load[1] = {0};
  getloadavg(load, 1);
  char buf[512];
  snprintf(buf, sizeof buf, "%s %s, %s, %ld cores online, load average %.2f", u.sysname, u.release, CpuModel().c_str(),
           sysconf(_SC_NPROCESSORS_ONLN), load[0]);
  return buf;
}

}  // namespace corvid::bench
