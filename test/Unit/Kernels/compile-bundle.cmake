# cmake -DCAC=... -DSRC=... -DDIR=... -DSTAMP=... -P compile-bundle.cmake
# Runs `cac compile --bundle DIR SRC` for the runtime tests. A compiler failure
# must not break the build of everything else: it is written to
# DIR/compile-error.txt, which the StdlibBundle tests report as a failure.
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
execute_process(
  COMMAND ${CAC} compile --bundle ${DIR} -o ${DIR}.ptx ${SRC}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  file(WRITE ${DIR}/compile-error.txt "cac compile --bundle failed (${rc}):\n${out}")
  message(WARNING "cac compile --bundle ${DIR} ${SRC} failed:\n${out}")
endif()
file(TOUCH ${STAMP})
