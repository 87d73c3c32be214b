/* ss_index.h — part of libss; include "ss.h", not this file. */
#ifndef SS_INDEX_H
#define SS_INDEX_H
#endif
