/* The kernel emulator's fiber switch on x86-64 (emu.cpp): saves the
 * callee-saved registers and the SSE/x87 control words on the current
 * stack, stores the stack pointer in *rdi, loads rsi as the new stack
 * pointer and restores what that stack holds. No system call, unlike
 * swapcontext (which saves the signal mask each time). This file carries no
 * CET property note, so the test executables are not marked for shadow
 * stacks, which a fiber's first switch (a ret into its entry) would break. */
    .text
    .globl px_emu_switch
    .type px_emu_switch, @function
px_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size px_emu_switch, .-px_emu_switch
    .section .note.GNU-stack,"",@progbits
