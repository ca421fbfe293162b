# vt serve: the request parser (unit), the server over HTTP on the trained
# fixture (test_serve: endpoints, greedy output equal to vt run, SSE shape,
# bad input, load with disconnects, SIGTERM), and the official OpenAI Node SDK
# against it (serve_openai_node; node + tests/serve/node_modules from
# scripts/deps.sh).
vt_add_test(test_serve_request SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_serve_request.c
            LIBS vtserve PkgConfig::CJSON LABELS "serve" TIMEOUT 60)
vt_add_test(test_serve_tools SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_serve_tools.c
            LIBS vtserve PkgConfig::CJSON LABELS "serve" TIMEOUT 60)
vt_add_test(test_json_schema SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_json_schema.c
            LIBS vtserve PkgConfig::CJSON LABELS "serve" TIMEOUT 120)
vt_add_test(test_serve SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_serve.c ${CMAKE_CURRENT_SOURCE_DIR}/serve_harness.c
            LIBS vtserve PkgConfig::CJSON Threads::Threads LABELS "serve;fixtures" TIMEOUT 300)
add_dependencies(test_serve vt backend-cpu model-qwen35)
add_test(NAME serve_openai_node
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve/openai_node.sh $<TARGET_FILE:vt>
                 ${VT_FIXTURES_DIR} ${VT_PLUGIN_OUTPUT_DIR})
set_tests_properties(serve_openai_node PROPERTIES LABELS "serve;fixtures" TIMEOUT 300
                     SKIP_RETURN_CODE 77)
# vt serve's formatter with each cJSON allocation failing in turn
# (test_serve_oom.c): a stream is whole or ends with one error event, a body
# is whole or a JSON 500, the scheduler serves on.
vt_add_test(test_serve_oom SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_serve_oom.c
            LIBS vtserve PkgConfig::CJSON LABELS "serve;fixtures" TIMEOUT 300)
add_dependencies(test_serve_oom backend-cpu model-qwen35)
# What vt serve refuses at the door (issue 43): a port in use, a missing API
# key before the body, ambiguous framing, a key given twice, raw-byte methods.
vt_add_test(test_serve_guard SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_serve_guard.c
            ${CMAKE_CURRENT_SOURCE_DIR}/serve_harness.c
            LIBS vtserve PkgConfig::CJSON LABELS "serve;fixtures" TIMEOUT 300)
add_dependencies(test_serve_guard vt backend-cpu model-qwen35)
