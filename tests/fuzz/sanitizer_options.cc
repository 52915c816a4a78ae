// Default sanitizer options of every fuzz target, so that a target run by
// hand behaves as scripts/fuzz.sh runs it. UBSan reports are recoverable in
// this build (the suppressions need that) but halt here: any report not
// suppressed ends the run as a crash libFuzzer saves. $UBSAN_OPTIONS still
// overrides these.
#ifndef CORVID_UBSAN_SUPPRESSIONS
#error "CORVID_UBSAN_SUPPRESSIONS (the path of ubsan.supp) must be defined"
#endif

extern "C" const char* __ubsan_default_options() {
  return "halt_on_error=1:print_stacktrace=1:report_error_type=1:suppressions=" CORVID_UBSAN_SUPPRESSIONS;
}
