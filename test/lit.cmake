# lit (FileCheck) tests of the compiler, included by test/CMakeLists.txt when
# the compiler is built. Writes lit.site.cfg.py into the build's test/ folder,
# registers the CTest test `lit` and the target `check-cac`.

if(LLVM_EXTERNAL_LIT)
  set(CAC_LIT_COMMAND ${LLVM_EXTERNAL_LIT})
else()
  find_program(CAC_LIT_EXECUTABLE NAMES lit llvm-lit lit.py
    HINTS ${LLVM_TOOLS_BINARY_DIR} /usr/lib/llvm-19/build/utils/lit)
  if(NOT CAC_LIT_EXECUTABLE)
    message(WARNING "lit not found: set LLVM_EXTERNAL_LIT; the lit tests are off")
    return()
  endif()
  set(CAC_LIT_COMMAND ${CAC_LIT_EXECUTABLE})
endif()
# lit.py is a script, not necessarily executable: run it with Python.
if(CAC_LIT_COMMAND MATCHES "\\.py$")
  set(CAC_LIT_COMMAND ${CAC_PYTHON} ${CAC_LIT_COMMAND})
endif()

find_program(CAC_PTXAS ptxas HINTS /usr/local/cuda/bin ENV CUDA_HOME
             PATH_SUFFIXES bin)
if(NOT CAC_PTXAS)
  set(CAC_PTXAS "")
endif()

set(CAC_LIT_SOURCE_DIR ${PROJECT_SOURCE_DIR})
set(CAC_LIT_BINARY_DIR ${PROJECT_BINARY_DIR})
set(CAC_LIT_TOOLS_DIR ${CMAKE_RUNTIME_OUTPUT_DIRECTORY})
set(CAC_LIT_LLVM_TOOLS_DIR ${LLVM_TOOLS_BINARY_DIR})
set(CAC_LIT_PYTHON ${CAC_PYTHON})
set(CAC_LIT_PTXAS ${CAC_PTXAS})
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/lit.site.cfg.py.in
               ${CMAKE_CURRENT_BINARY_DIR}/lit.site.cfg.py @ONLY)

set(CAC_LIT_DEPENDS cac cac-opt)

add_test(NAME lit
         COMMAND ${CAC_LIT_COMMAND} -sv ${CMAKE_CURRENT_BINARY_DIR})
# A guard against a hang, not a time budget: the suite takes about 3 minutes
# of two idle cores and over 10 on two busy ones.
set_tests_properties(lit PROPERTIES TIMEOUT 2400)

add_custom_target(check-cac
  COMMAND ${CAC_LIT_COMMAND} -sv ${CMAKE_CURRENT_BINARY_DIR}
  DEPENDS ${CAC_LIT_DEPENDS}
  COMMENT "Running the cac lit tests"
  USES_TERMINAL)
