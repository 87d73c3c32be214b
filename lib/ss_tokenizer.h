/* ss_tokenizer.h — part of libss; include "ss.h", not this file. */
#ifndef SS_TOKENIZER_H
#define SS_TOKENIZER_H
#endif
