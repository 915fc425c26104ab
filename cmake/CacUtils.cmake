# Helpers shared by all cac targets.

# LLVM is built without exceptions and HandleLLVMOptions adds -fno-exceptions
# globally. Code that talks to ANTLR or LibTorch needs them back, per target.
function(cac_enable_exceptions target)
  target_compile_options(${target} PRIVATE -fexceptions)
  if(NOT LLVM_ENABLE_RTTI)
    target_compile_options(${target} PRIVATE -frtti)
  endif()
endfunction()

# Generates the ANTLR4 C++ parser for a grammar into ${out_dir}.
# Sets ${prefix}_SOURCES and ${prefix}_INCLUDE_DIR in the parent scope.
function(cac_antlr4_generate prefix grammar out_dir package)
  get_filename_component(name ${grammar} NAME_WE)
  set(outputs
    ${out_dir}/${name}Lexer.cpp ${out_dir}/${name}Lexer.h
    ${out_dir}/${name}Parser.cpp ${out_dir}/${name}Parser.h
    ${out_dir}/${name}Visitor.cpp ${out_dir}/${name}Visitor.h
    ${out_dir}/${name}BaseVisitor.cpp ${out_dir}/${name}BaseVisitor.h)
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
    COMMAND ${ANTLR4_TOOL} -Dlanguage=Cpp -visitor -no-listener
            -package ${package} -Xexact-output-dir -o ${out_dir} ${grammar}
    DEPENDS ${grammar}
    COMMENT "ANTLR4: generating the ${name} parser"
    VERBATIM)
  set(${prefix}_SOURCES ${out_dir}/${name}Lexer.cpp ${out_dir}/${name}Parser.cpp
      ${out_dir}/${name}Visitor.cpp ${out_dir}/${name}BaseVisitor.cpp PARENT_SCOPE)
  set(${prefix}_INCLUDE_DIR ${out_dir} PARENT_SCOPE)
endfunction()

# Registers one ctest entry per GoogleTest suite of ${target}, named
# ${prefix}.SUITE, with the suites read from the TEST/TEST_F/TEST_P lines of
# ${ARGN} (the target's test sources), so a new suite can never be left out.
# For test programs that load LibTorch (about a second per process), where
# gtest_discover_tests' one process per test would cost more than the tests.
function(cac_add_gtest_suites target prefix timeout)
  set(suites)
  foreach(src ${ARGN})
    file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/${src} lines
         REGEX "^TEST(_F|_P)?\\(")
    foreach(line ${lines})
      string(REGEX REPLACE "^TEST(_F|_P)?\\(([A-Za-z0-9_]+),.*" "\\2" suite
             "${line}")
      list(APPEND suites ${suite})
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES suites)
  foreach(suite ${suites})
    add_test(NAME ${prefix}.${suite}
             COMMAND ${target} --gtest_filter=${suite}.*:*/${suite}.*)
    set_tests_properties(${prefix}.${suite} PROPERTIES TIMEOUT ${timeout})
  endforeach()
endfunction()
