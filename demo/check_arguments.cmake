# CTest script (tests/CMakeLists.txt: demo_rejects_bad_arguments): the demo refuses each bad
# argument with a message and exit status 2, a shape whose memory cannot be had with a
# message and status 1 (not an abort), and still runs a valid small shape (status 0), so the
# refusals cannot pass by the demo failing on everything.
#   cmake -DDEMO=<path to rudnn_demo> -P check_arguments.cmake
if(NOT DEMO)
  message(FATAL_ERROR "pass -DDEMO=<path to rudnn_demo>")
endif()

set(failures 0)
# expect(<status> <stderr regex> <arguments>...)
function(expect status pattern)
  execute_process(COMMAND ${DEMO} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  string(REPLACE ";" " " shown "${ARGN}")
  if(NOT rc STREQUAL "${status}" OR NOT err MATCHES "${pattern}")
    message(SEND_ERROR "rudnn_demo ${shown}: exit status ${rc} (expected ${status}), stderr \"${err}\" "
                       "(expected to match \"${pattern}\")")
  else()
    message(STATUS "rudnn_demo ${shown}: status ${rc}, ${err}")
  endif()
endfunction()

expect(2 "--rows 0: expected an integer" --cpu --rows 0)
expect(2 "--rows abc: expected an integer" --cpu --rows abc)
expect(2 "--cols -5: expected an integer" --cpu --cols -5)
expect(2 "--iters 0: expected an integer" --cpu --iters 0)
expect(2 "--rows 12x: expected an integer" --cpu --rows 12x)
expect(2 "--dtype f64: expected f32, f16 or bf16" --cpu --dtype f64)
expect(2 "--rows needs a value" --cpu --rows)
expect(2 "unknown argument --bogus" --bogus)
expect(1 "rudnn_demo: .*(memory|Memory)" --cpu --rows 99999999999)
expect(0 "^$" --cpu --rows 3 --cols 5 --iters 1)
