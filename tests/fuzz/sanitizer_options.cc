// Default sanitizer options of every fuzz target, so that a target run by
// hand reports as scripts/fuzz.sh runs it (UBSan halts on any report in
// this build: -fno-sanitize-recover). $UBSAN_OPTIONS still overrides these.
extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1:report_error_type=1"; }
