/* ss_model.h — part of libss; include "ss.h", not this file. */
#ifndef SS_MODEL_H
#define SS_MODEL_H
#endif
