# Pipeline schedules, the plan simulator and the partitioner (pure logic, no actors): the
# sources for strata::actors, relative to actors/. Included by actors/CMakeLists.txt and
# tests/pipeline/CMakeLists.txt. Design: docs/pipeline.md.
set(STRATA_PIPELINE_SOURCES
  src/pipeline/plan.cpp
  src/pipeline/simulator.cpp
  src/pipeline/partitioner.cpp
)
