# strata_mpi_test(<name> <np> <btl> <mpirun_timeout_s> <ctest_timeout_s> <command...>)
# One ctest under mpirun (label mpi), always pinned to loopback: this machine has another
# interface, and traffic to any other address is not allowed. STRATA_MPI_TEST_ENV is the
# environment every such run (and any hand-written mpirun test) gets; it is a directory variable,
# so each CMakeLists.txt that needs it includes this file (no include guard).
set(STRATA_MPI_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo
    OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1)
# strata_mpi_command(<var> <np> <btl> <mpirun_timeout_s>): sets <var> to the mpirun command line (a
# list, the program and its arguments to follow) that every MPI test starts its ranks with, pinned
# to loopback; for a test that runs it from a script.
function(strata_mpi_command var np btl mpirun_timeout)
  set(${var} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --bind-to none --timeout ${mpirun_timeout}
      --mca btl ${btl} --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo PARENT_SCOPE)
endfunction()
# strata_mpi_test_properties(<name> <ctest_timeout_s>): what every MPI test has: the environment,
# label mpi, both cores and the lock that keeps MPI jobs from running side by side.
function(strata_mpi_test_properties name ctest_timeout)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${STRATA_MPI_TEST_ENV}" LABELS mpi PROCESSORS 2
                       RESOURCE_LOCK mpi TIMEOUT ${ctest_timeout})
endfunction()
function(strata_mpi_test name np btl mpirun_timeout ctest_timeout)
  strata_mpi_command(launch ${np} ${btl} ${mpirun_timeout})
  add_test(NAME ${name} COMMAND ${launch} ${ARGN})
  strata_mpi_test_properties(${name} ${ctest_timeout})
endfunction()
