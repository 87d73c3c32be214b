/* ss_forward.h — part of libss; include "ss.h", not this file. */
#ifndef SS_FORWARD_H
#define SS_FORWARD_H
#endif
