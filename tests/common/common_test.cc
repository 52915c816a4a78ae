// The helpers every component shares (common/): fixed values for the ones
// whose output is on disk, so that no refactoring changes a format.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "common/durable_file.h"
#include "common/exact_json.h"
#include "common/fnv1a.h"
#include "common/listener_set.h"
#include "common/log.h"
#include "common/varint.h"

using namespace corvid;

TEST_CASE("Fnv1a64 keeps the values on disk") {
  // Not the published FNV-1a vectors (its offset basis is one digit short,
  // common/fnv1a.h): the values every store and fingerprint holds.
  CHECK(Fnv1a64("") == 0x14650fb0739d0383ull);
  CHECK(Fnv1a64("a") == 0x44bd8ad473cd9906ull);
  CHECK(Fnv1a64("foobar") == 0x88fad7c0a8ff07f2ull);
  // Continued: the hash of a concatenation.
  CHECK(Fnv1a64("bar", Fnv1a64("foo")) == Fnv1a64("foobar"));
  static_assert(Fnv1a64("") == kFnv1a64Offset);
}

TEST_CASE("WriteFileAtomic replaces a file whole; ReadWholeFile reads it") {
  const std::string dir = (std::filesystem::temp_directory_path() / ("corvid-common-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string got;
  Status missing = ReadWholeFile(dir + "/f", &got);
  CHECK(missing.code() == StatusCode::kNotFound);
  CHECK(missing.message() == dir + "/f");  // callers compare it
  REQUIRE(WriteFileAtomic(dir, "f", "first").ok());
  REQUIRE(ReadWholeFile(dir + "/f", &got).ok());
  CHECK(got == "first");
  const std::string big(3 << 20, 'x');
  REQUIRE(WriteFileAtomic(dir, "f", big).ok());
  REQUIRE(ReadWholeFile(dir + "/f", &got).ok());
  CHECK(got == big);
  CHECK_FALSE(std::filesystem::exists(dir + "/f.tmp"));
  REQUIRE(WriteFileAtomic(dir, "f", "").ok());
  REQUIRE(ReadWholeFile(dir + "/f", &got).ok());
  CHECK(got.empty());
  // A directory that is not there: an error, nothing written.
  CHECK_FALSE(WriteFileAtomic(dir + "/nowhere", "f", "x").ok());
  CHECK(FsyncDir(dir).ok());
  CHECK_FALSE(FsyncDir(dir + "/nowhere").ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("log levels and formats parse; RateLimit lets a burst through, then counts") {
  logging::Level level;
  logging::Format format;
  CHECK(logging::ParseLevel("warn", level));
  CHECK(level == logging::Level::kWarn);
  CHECK_FALSE(logging::ParseLevel("loud", level));
  CHECK(logging::ParseFormat("json", format));
  CHECK(format == logging::Format::kJson);
  CHECK_FALSE(logging::ParseFormat("xml", format));
  logging::RateLimit limit(3, std::chrono::hours(1));
  uint64_t suppressed = 99;
  for (int i = 0; i < 3; ++i) {
    CHECK(limit.Allow(suppressed));
    CHECK(suppressed == 0);
  }
  for (int i = 0; i < 5; ++i) CHECK_FALSE(limit.Allow(suppressed));
}

TEST_CASE("varints are LEB128, up to 64 bits") {
  std::string out;
  PutVarint(out, 0);
  PutVarint(out, 127);
  PutVarint(out, 128);
  PutVarint(out, 300);
  PutVarint(out, UINT64_MAX);
  CHECK(out == std::string("\x00\x7f\x80\x01\xac\x02", 6) + std::string(9, '\xff') + "\x01");
  const char* p = out.data();
  const char* end = out.data() + out.size();
  for (uint64_t want : {uint64_t{0}, uint64_t{127}, uint64_t{128}, uint64_t{300}, UINT64_MAX}) {
    uint64_t v = 1;
    REQUIRE(GetVarint(p, end, v));
    CHECK(v == want);
  }
  CHECK(p == end);
  uint64_t v;
  const std::string cut = "\x80\x80";
  p = cut.data();
  CHECK_FALSE(GetVarint(p, cut.data() + cut.size(), v));  // runs past the end
  const std::string long_one(11, '\x80');
  p = long_one.data();
  CHECK_FALSE(GetVarint(p, long_one.data() + long_one.size(), v));  // more than 64 bits
}

TEST_CASE("integers beyond 64 bits are written back with their digits") {
  // API.md: an integer too large for uint64 keeps its digits. The DOM
  // holds its double; BigIntegers keeps its text for WriteExactly.
  const std::string json =
      R"({"big":123456789012345678901234567890,"neg":-9223372036854775809,"u":18446744073709551615,)"
      R"("i":-9223372036854775808,"d":1.5,"e":1e30,"same":[123456789012345678901234567891,)"
      R"(123456789012345678901234567890,{"x":18446744073709551616}],"s":"123456789012345678901234567890"})";
  const std::string exact =
      R"({"big":123456789012345678901234567890,"neg":-9223372036854775809,"u":18446744073709551615,)"
      R"("i":-9223372036854775808,"d":1.5,"e":1e30,"same":[123456789012345678901234567891,)"
      R"(123456789012345678901234567890,{"x":18446744073709551616}],"s":"123456789012345678901234567890"})";
  auto write = [](const rapidjson::Value& v, const BigIntegers* big) {
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> w(sb);
    REQUIRE(WriteExactly(v, w, big));
    return std::string(sb.GetString(), sb.GetSize());
  };
  rapidjson::Document d;
  BigIntegers big;
  REQUIRE_FALSE(ParseWithExactNumbers(d, json, &big).IsError());
  CHECK(d["big"].IsDouble());  // numbers are what they were: the digits are beside them
  CHECK(d["u"].IsUint64());
  CHECK(write(d, &big) == exact);
  CHECK(write(d["same"], &big) == R"([123456789012345678901234567891,123456789012345678901234567890,{"x":18446744073709551616}])");
  CHECK(write(d["neg"], &big) == "-9223372036854775809");
  CHECK(*big.Find(d["same"][2]["x"]) == "18446744073709551616");
  CHECK(big.Find(d["d"]) == nullptr);
  CHECK(big.Find(d["e"]) == nullptr);  // not an integer as written
  // Without them, as Accept writes: the doubles.
  CHECK(write(d, nullptr).find("\"big\":1.2345678901234568e29") != std::string::npos);
  // In place, too; and a document without any costs nothing and writes as Accept.
  std::string copy = json;
  rapidjson::Document di;
  REQUIRE_FALSE(ParseInsituWithExactNumbers(di, copy.data(), &big).IsError());
  CHECK(write(di, &big) == exact);
  std::string plain = R"({"a":1,"b":[2.5,-3],"c":"x"})";
  REQUIRE_FALSE(ParseWithExactNumbers(d, plain, &big).IsError());
  CHECK(big.empty());
  CHECK(write(d, &big) == plain);
  // A failed parse leaves none behind.
  CHECK(ParseWithExactNumbers(d, "{\"a\":123456789012345678901234567890,", &big).IsError());
  CHECK(big.empty());
}

TEST_CASE("a number beyond a double's range, from an older store, reads as the largest double and writes back as written") {
  // The validator refuses 10e308 now; stores written before held it, and
  // a search answer wrote `"n":}` (RapidJSON's writer gives up on infinity).
  const std::string json = R"({"a":10e308,"b":[1,-1.8e308,2],"c":123456789012345678901234567890,"d":1e308})";
  rapidjson::Document d;
  BigIntegers big;
  REQUIRE_FALSE(ParseWithExactNumbers(d, json, &big).IsError());
  CHECK(d["a"].GetDouble() == std::numeric_limits<double>::max());
  CHECK(d["b"][1].GetDouble() == -std::numeric_limits<double>::max());
  CHECK(d["d"].GetDouble() == 1e308);
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  REQUIRE(WriteExactly(d, w, &big));
  CHECK(std::string(sb.GetString(), sb.GetSize()) == json);
  rapidjson::StringBuffer plain;
  rapidjson::Writer<rapidjson::StringBuffer> pw(plain);
  REQUIRE(d.Accept(pw));  // without the texts: the largest double, valid JSON
  CHECK(std::string(plain.GetString()).find("\"a\":1.7976931348623157e308") != std::string::npos);
}

TEST_CASE("ListenerSet: once Remove returns, the callback is not running and never runs again") {
  // An index slot removes its commit listener (which captures `this`) and
  // is destroyed: a call still in flight on the committing thread would
  // touch freed memory (TSan caught it in CI).
  ListenerSet<int> set;
  std::atomic<bool> in_call{false};
  std::atomic<int> calls{0};
  const uint64_t h = set.Add([&](int) {
    in_call = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    calls++;
    in_call = false;
  });
  std::thread notifier([&] { set.Notify(1); });
  while (!in_call) std::this_thread::yield();
  set.Remove(h);
  CHECK_FALSE(in_call);
  CHECK(calls == 1);
  notifier.join();
  set.Notify(2);
  CHECK(calls == 1);
}

TEST_CASE("ListenerSet: a callback may remove itself, and others") {
  ListenerSet<int> set;
  uint64_t self = 0, other = 0;
  int self_calls = 0, other_calls = 0;
  other = set.Add([&](int) { other_calls++; });
  self = set.Add([&](int) {
    self_calls++;
    set.Remove(self);  // the recursive call mutex: not a deadlock
    set.Remove(other);
  });
  set.Notify(3);  // `other` was added first: it runs, then `self` removes both
  set.Notify(4);
  CHECK(self_calls == 1);
  CHECK(other_calls == 1);
}
