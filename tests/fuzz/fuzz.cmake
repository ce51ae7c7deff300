# The fuzz build (-DLOCKSTEP_FUZZ=ON, scripts/fuzz): proto, core, the wire library and the
# libFuzzer targets in tests/fuzz, nothing else. Included from the top CMakeLists after
# its find_package calls; everything is compiled with coverage instrumentation for
# libFuzzer and with ASan and UBSan, so that a bug in a parser stops the run at once.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "LOCKSTEP_FUZZ needs clang (libFuzzer): configure with CXX=clang++, "
                      "or run scripts/fuzz")
endif()

add_compile_definitions(LOCKSTEP_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
include_directories(${CMAKE_SOURCE_DIR})
set(lockstep_sanitizers -fsanitize=address,undefined -fno-sanitize-recover=undefined)
add_compile_options(-fsanitize=fuzzer-no-link ${lockstep_sanitizers} -fno-omit-frame-pointer -g)
add_link_options(${lockstep_sanitizers})

# Unit tests belong to the normal build: here lockstep_test (core/CMakeLists.txt) is a no-op.
function(lockstep_test)
endfunction()

add_subdirectory(proto)
add_subdirectory(core)
add_subdirectory(tests/fuzz)
