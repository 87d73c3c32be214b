/* ss_compose.h — part of libss; include "ss.h", not this file. */
#ifndef SS_COMPOSE_H
#define SS_COMPOSE_H
#endif
