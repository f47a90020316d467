# strata_mpi_test(<name> <np> <btl> <mpirun_timeout_s> <ctest_timeout_s> <command...>)
# One ctest under mpirun (label mpi), always pinned to loopback: this machine has another
# interface, and traffic to any other address is not allowed. STRATA_MPI_TEST_ENV is the
# environment every such run (and any hand-written mpirun test) gets; it is a directory variable,
# so each CMakeLists.txt that needs it includes this file (no include guard).
set(STRATA_MPI_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo
    OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1)
function(strata_mpi_test name np btl mpirun_timeout ctest_timeout)
  add_test(NAME ${name} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --bind-to none
           --timeout ${mpirun_timeout} --mca btl ${btl} --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo ${ARGN})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${STRATA_MPI_TEST_ENV}" LABELS mpi PROCESSORS 2
                       RESOURCE_LOCK mpi TIMEOUT ${ctest_timeout})
endfunction()
