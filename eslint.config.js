// ESLint (flat config, `npm run lint`): the recommended rules, and typescript-eslint's type-aware
// checks on promises (a promise nobody awaits, or one handed where a callback's result is
// dropped), the bugs a type-check alone lets through. Layout rules are dependency-cruiser's
// (.dependency-cruiser.cjs) and formatting is Prettier's (.prettierrc.json).
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'coverage/', '.leasehold/', '**/.sst/', 'test-results/', 'scratch/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: {
      parserOptions: {
        // The sst.config.ts files and vitest.config.ts sit outside every tsconfig.
        projectService: { allowDefaultProject: ['sst.config.ts', 'vitest.config.ts', 'examples/app/sst.config.ts'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
    },
  },
  {
    // Size limits on the library and the deploy component (CONVENTIONS.md, "Seams"): a file that
    // outgrows them holds a second concern, which becomes a collaborator in a file of its own.
    // Lines of code only: blank lines and comments do not count. No exception is needed today;
    // one would be named here with its reason (a generated file).
    files: ['src/**/*.ts', 'infra/**/*.ts'],
    rules: {
      'max-lines': ['error', { max: 500, skipBlankLines: true, skipComments: true }],
      'max-lines-per-function': ['error', { max: 100, skipBlankLines: true, skipComments: true }],
    },
  },
  {
    // SST declares `$config` and its globals through this reference; its config files must use it.
    files: ['**/sst.config.ts'],
    rules: { '@typescript-eslint/triple-slash-reference': 'off' },
  },
  {
    // Tests read parsed JSON answers field by field; src's types are what the type-check guards.
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    languageOptions: { globals: { ...globals.node } },
  },
  {
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
