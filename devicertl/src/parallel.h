/* Internal to parallel.c: calling an outlined parallel region with its
 * captured variables. clang passes them as an array of pointer-sized values
 * and the outlined function takes them as separate parameters; GPUs have no
 * portable way to build a call with a runtime argument count, so each count
 * gets its own call through a prototype of that many `void *`. */
#ifndef OMPDEVICE_PARALLEL_H
#define OMPDEVICE_PARALLEL_H

/* The most captured variables a region may have. */
#define RTL_MAX_REGION_ARGS 32

#define RTL_PARAMS_1 void *
#define RTL_PARAMS_2 RTL_PARAMS_1, void *
#define RTL_PARAMS_3 RTL_PARAMS_2, void *
#define RTL_PARAMS_4 RTL_PARAMS_3, void *
#define RTL_PARAMS_5 RTL_PARAMS_4, void *
#define RTL_PARAMS_6 RTL_PARAMS_5, void *
#define RTL_PARAMS_7 RTL_PARAMS_6, void *
#define RTL_PARAMS_8 RTL_PARAMS_7, void *
#define RTL_PARAMS_9 RTL_PARAMS_8, void *
#define RTL_PARAMS_10 RTL_PARAMS_9, void *
#define RTL_PARAMS_11 RTL_PARAMS_10, void *
#define RTL_PARAMS_12 RTL_PARAMS_11, void *
#define RTL_PARAMS_13 RTL_PARAMS_12, void *
#define RTL_PARAMS_14 RTL_PARAMS_13, void *
#define RTL_PARAMS_15 RTL_PARAMS_14, void *
#define RTL_PARAMS_16 RTL_PARAMS_15, void *
#define RTL_PARAMS_17 RTL_PARAMS_16, void *
#define RTL_PARAMS_18 RTL_PARAMS_17, void *
#define RTL_PARAMS_19 RTL_PARAMS_18, void *
#define RTL_PARAMS_20 RTL_PARAMS_19, void *
#define RTL_PARAMS_21 RTL_PARAMS_20, void *
#define RTL_PARAMS_22 RTL_PARAMS_21, void *
#define RTL_PARAMS_23 RTL_PARAMS_22, void *
#define RTL_PARAMS_24 RTL_PARAMS_23, void *
#define RTL_PARAMS_25 RTL_PARAMS_24, void *
#define RTL_PARAMS_26 RTL_PARAMS_25, void *
#define RTL_PARAMS_27 RTL_PARAMS_26, void *
#define RTL_PARAMS_28 RTL_PARAMS_27, void *
#define RTL_PARAMS_29 RTL_PARAMS_28, void *
#define RTL_PARAMS_30 RTL_PARAMS_29, void *
#define RTL_PARAMS_31 RTL_PARAMS_30, void *
#define RTL_PARAMS_32 RTL_PARAMS_31, void *
#define RTL_ARGS_1 args[0]
#define RTL_ARGS_2 RTL_ARGS_1, args[1]
#define RTL_ARGS_3 RTL_ARGS_2, args[2]
#define RTL_ARGS_4 RTL_ARGS_3, args[3]
#define RTL_ARGS_5 RTL_ARGS_4, args[4]
#define RTL_ARGS_6 RTL_ARGS_5, args[5]
#define RTL_ARGS_7 RTL_ARGS_6, args[6]
#define RTL_ARGS_8 RTL_ARGS_7, args[7]
#define RTL_ARGS_9 RTL_ARGS_8, args[8]
#define RTL_ARGS_10 RTL_ARGS_9, args[9]
#define RTL_ARGS_11 RTL_ARGS_10, args[10]
#define RTL_ARGS_12 RTL_ARGS_11, args[11]
#define RTL_ARGS_13 RTL_ARGS_12, args[12]
#define RTL_ARGS_14 RTL_ARGS_13, args[13]
#define RTL_ARGS_15 RTL_ARGS_14, args[14]
#define RTL_ARGS_16 RTL_ARGS_15, args[15]
#define RTL_ARGS_17 RTL_ARGS_16, args[16]
#define RTL_ARGS_18 RTL_ARGS_17, args[17]
#define RTL_ARGS_19 RTL_ARGS_18, args[18]
#define RTL_ARGS_20 RTL_ARGS_19, args[19]
#define RTL_ARGS_21 RTL_ARGS_20, args[20]
#define RTL_ARGS_22 RTL_ARGS_21, args[21]
#define RTL_ARGS_23 RTL_ARGS_22, args[22]
#define RTL_ARGS_24 RTL_ARGS_23, args[23]
#define RTL_ARGS_25 RTL_ARGS_24, args[24]
#define RTL_ARGS_26 RTL_ARGS_25, args[25]
#define RTL_ARGS_27 RTL_ARGS_26, args[26]
#define RTL_ARGS_28 RTL_ARGS_27, args[27]
#define RTL_ARGS_29 RTL_ARGS_28, args[28]
#define RTL_ARGS_30 RTL_ARGS_29, args[29]
#define RTL_ARGS_31 RTL_ARGS_30, args[30]
#define RTL_ARGS_32 RTL_ARGS_31, args[31]

/* One `case` of the switch in invoke_region(): the outlined function takes
 * (int32_t *gtid, int32_t *btid, void *arg0, ..., void *arg{n-1}). */
#define RTL_INVOKE_CASE(n)                                                                 \
  case n:                                                                                  \
    ((void (*)(int32_t *, int32_t *, RTL_PARAMS_##n))fn)(gtid, btid, RTL_ARGS_##n);        \
    return

#endif
