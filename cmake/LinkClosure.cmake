# lockstep_check_link_closure(target): fails the configure when anything `target` links,
# directly or through other targets (PRIVATE dependencies of static libraries included),
# is a library the step and the kernels must not link (core/CMakeLists.txt): protobuf,
# gRPC, yaml-cpp, nlohmann_json, OpenSSL, zlib, libzip, libjpeg, libpng, or one of the
# project's libraries that bring them. Checked once every target is defined (the end of
# the top-level CMakeLists), so that a dependency added later in the tree counts too.
set(LOCKSTEP_FORBIDDEN_IN_STEP
    "proto|grpc|gRPC|yaml|json|OpenSSL|ssl|crypto|ZLIB|zlib|LIBZIP|zip|JPEG|jpeg|PNG|png|lockstep_(data|core|model_spec)"
    CACHE INTERNAL "What the step and the kernels link none of")

function(lockstep_check_link_closure target)
  # A deferred call reads its arguments' variables when it runs: pass the name itself.
  cmake_language(EVAL CODE "cmake_language(DEFER DIRECTORY [[${CMAKE_SOURCE_DIR}]] CALL _lockstep_check_link_closure [[${target}]])")
endfunction()

function(_lockstep_check_link_closure target)
  set(queue "${target}")
  set(seen "")
  while(queue)
    list(POP_FRONT queue t)
    if(t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen "${t}")
    get_target_property(libs "${t}" INTERFACE_LINK_LIBRARIES)
    if(NOT libs)
      continue()
    endif()
    foreach(lib IN LISTS libs)
      # A static library's PRIVATE dependencies read $<LINK_ONLY:name>.
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" lib "${lib}")
      if(lib MATCHES "${LOCKSTEP_FORBIDDEN_IN_STEP}")
        message(FATAL_ERROR "${target} links ${lib} (through ${t}): the step and the kernels "
                            "link no protobuf, gRPC, YAML, JSON, OpenSSL, zlib, libzip or image "
                            "codecs (core/CMakeLists.txt)")
      endif()
      if(TARGET "${lib}")
        list(APPEND queue "${lib}")
      endif()
    endforeach()
  endwhile()
endfunction()
