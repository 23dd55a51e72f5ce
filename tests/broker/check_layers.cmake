# Checks that the broker's layers depend only downwards (docs/architecture.md):
# a file of a layer may include broker headers of its own layer or below,
# never above. Run: cmake -DBROKER=<dir> -P check_layers.cmake
#
# Layers, lowest first. Every file of the folder must be listed.
set(layer_0 delivery_target channel_table routing_table lease_table subscription_index flat_index string_hash
            frame_arena outbound_queue record_destination refusal_summary server_config setting_table toml_config server_counters
            token_bucket drain_schedule admission_control authenticator latency_histogram feature_flags
            offer_table exposure_table)
set(layer_1 fanout)
set(layer_2 capabilities peer wire_error durable_pipeline)
set(layer_3 pubsub_handler routing_handler log_handler stream_admin_handler server_admin_handler offer_handler)
set(layer_4 dispatcher)
set(layer_5 connection byte_stream tls_context loop_pressure input_memory connection_registry)
set(layer_6 server metrics_snapshot metric_catalog log_format main http_monitor metrics_exposition monitor_pages)

set(all_layers 0 1 2 3 4 5 6)
set(failures "")
foreach(level IN LISTS all_layers)
  foreach(name IN LISTS layer_${level})
    foreach(ext hpp cpp)
      set(file "${BROKER}/${name}.${ext}")
      if(NOT EXISTS "${file}")
        continue()
      endif()
      file(STRINGS "${file}" includes REGEX "^#include \"broker/")
      foreach(line IN LISTS includes)
        string(REGEX REPLACE "^#include \"broker/([a-z_]+)\\.hpp\".*" "\\1" used "${line}")
        foreach(higher IN LISTS all_layers)
          if(higher GREATER level)
            list(FIND layer_${higher} "${used}" found)
            if(NOT found EQUAL -1)
              string(APPEND failures "\n  ${name}.${ext} (layer ${level}) includes ${used}.hpp (layer ${higher})")
            endif()
          endif()
        endforeach()
      endforeach()
    endforeach()
  endforeach()
endforeach()
# Every file belongs to a layer, so that a new one is checked too.
set(listed "")
foreach(level IN LISTS all_layers)
  list(APPEND listed ${layer_${level}})
endforeach()
file(GLOB sources RELATIVE "${BROKER}" "${BROKER}/*.hpp" "${BROKER}/*.cpp")
foreach(source IN LISTS sources)
  string(REGEX REPLACE "\\.(hpp|cpp)$" "" name "${source}")
  list(FIND listed "${name}" found)
  if(found EQUAL -1)
    string(APPEND failures "\n  ${source} is in no layer (add it to tests/broker/check_layers.cmake)")
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "broker layering violated:${failures}")
endif()
message(STATUS "broker layers depend only downwards")
