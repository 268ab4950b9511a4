# llama.cpp's Jinja engine (common/jinja/ and the two files it needs, common/json.cpp and common/unicode.cpp),
# compiled from the llama-cpp-python sdist that launch/setup extracts under third_party/. Nothing of it is
# copied into our tree. Target: llama_jinja (static; its headers as SYSTEM includes: "jinja/runtime.h", "json.h").
get_filename_component(_tp_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(TP_LLAMA_CPP_SRC "${_tp_root}/third_party/llama_cpp_python-0.3.36/vendor/llama.cpp"
    CACHE PATH "llama.cpp sources (from the llama-cpp-python sdist; made by launch/setup)")
if(NOT EXISTS "${TP_LLAMA_CPP_SRC}/common/jinja/runtime.cpp")
  message(FATAL_ERROR "llama.cpp sources not found at ${TP_LLAMA_CPP_SRC} (its Jinja engine renders chat "
                      "templates): run launch/setup (SETUP_SKIP_BUILD=1 launch/setup is enough)")
endif()
set(_lj "${TP_LLAMA_CPP_SRC}/common")
add_library(llama_jinja STATIC
  ${_lj}/jinja/lexer.cpp ${_lj}/jinja/parser.cpp ${_lj}/jinja/runtime.cpp ${_lj}/jinja/value.cpp
  ${_lj}/jinja/string.cpp ${_lj}/jinja/caps.cpp ${_lj}/json.cpp ${_lj}/unicode.cpp
  ${CMAKE_CURRENT_LIST_DIR}/llama_jinja/ggml_abort.cpp)
target_include_directories(llama_jinja SYSTEM PUBLIC ${_lj} PRIVATE ${TP_LLAMA_CPP_SRC}/ggml/include)
target_link_libraries(llama_jinja PRIVATE nlohmann_json::nlohmann_json)
target_compile_features(llama_jinja PUBLIC cxx_std_17)
set_target_properties(llama_jinja PROPERTIES POSITION_INDEPENDENT_CODE ON)
